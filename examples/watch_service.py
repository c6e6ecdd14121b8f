"""A small image-generation service that keeps a flight record of its own pipeline calls.

Standard library only besides diffusers and GhostViewer: a threaded HTTP server on this machine's loopback that
answers `POST /generate {"prompt": "...", "seed": 3}` with a PNG, its one pipeline watched by GhostViewer with
keep="anomalies" — every call is judged, the bad ones are kept whole, the healthy ones leave a summary row.

    python examples/watch_service.py --port 8765 [--pipeline DIR] [--runs-dir DIR]
    python examples/watch_service.py --self-test 6      # start, send 6 requests from 2 threads, print the summary

Open the watch study it writes in the window (`ghostviewer gui RUNS_DIR/watch-…`) or `ghostviewer inspect` a kept run.
"""

from __future__ import annotations

import argparse
import io
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch
from diffusers import DiffusionPipeline

import ghostviewer

DEMO = Path(__file__).resolve().parents[1] / "resources" / "demo-pipeline"


class Service:
    def __init__(self, pipeline: Path, runs_dir: str | None) -> None:
        self.pipe = DiffusionPipeline.from_pretrained(str(pipeline))
        self.pipe.set_progress_bar_config(disable=True)
        self.watcher = ghostviewer.attach(self.pipe, runs_dir=runs_dir, keep="anomalies")
        self.lock = threading.Lock()  # one call at a time: the scheduler's state is the pipeline's own

    def generate(self, prompt: str, seed: int, steps: int) -> bytes:
        with self.lock:
            generator = torch.Generator("cpu").manual_seed(seed)
            image = self.pipe(prompt, num_inference_steps=steps, generator=generator).images[0]
        out = io.BytesIO()
        image.save(out, format="PNG")
        return out.getvalue()


def handler_for(service: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            try:
                length = min(int(self.headers.get("Content-Length") or 0), 1 << 16)
                request = json.loads(self.rfile.read(length) or b"{}")
                png = service.generate(str(request["prompt"]), int(request.get("seed", 0)),
                                       int(request.get("steps", 20)))
            except (KeyError, TypeError, ValueError) as exc:
                self.send_error(400, f"bad request: {exc}")
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(png)))
            self.end_headers()
            self.wfile.write(png)

        def log_message(self, *args: object) -> None:  # quiet: the record is the log
            pass

    return Handler


def self_test(server: ThreadingHTTPServer, requests: int) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"

    def client(first: int) -> None:
        for seed in range(first, requests, 2):
            body = json.dumps({"prompt": "a red circle on a blue background", "seed": seed, "steps": 4}).encode()
            with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=120) as answer:
                assert answer.read(8) == b"\x89PNG\r\n\x1a\n"

    threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--pipeline", type=Path, default=DEMO)
    parser.add_argument("--runs-dir")
    parser.add_argument("--self-test", type=int, metavar="N", help="serve N requests from 2 threads, then stop")
    args = parser.parse_args()
    service = Service(args.pipeline, args.runs_dir)
    server = ThreadingHTTPServer(("127.0.0.1", 0 if args.self_test else args.port), handler_for(service))
    try:
        if args.self_test:
            serving = threading.Thread(target=server.serve_forever, daemon=True)
            serving.start()
            self_test(server, args.self_test)
        else:
            print(f"serving on http://127.0.0.1:{args.port}/generate", flush=True)
            server.serve_forever()
    finally:
        server.shutdown() if args.self_test else None
        server.server_close()
        service.watcher.detach()
        print(json.dumps(service.watcher.summary()), flush=True)


if __name__ == "__main__":
    main()
