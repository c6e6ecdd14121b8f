"""A batch run's samples as the batch strip shows them: each final image (`final`, `final_1`, …), its verdict and
where it first showed NaN/Inf, in one sentence ("image 3 of 4: NaN at step 7 in unet.up_blocks.1"). No Qt: the
batch model calls read_batch on its Worker.

What the record keeps per sample: the final image, the verdict, the first NaN/Inf (the per-sample NaN/Inf table
when it has one, record/samples.py, else the run's sample_anomalies), the initial noise, and — in records made since
— each step's latents, x0 and previews (gui/data/step_data.py sample_step); an on-demand VAE decode is of the image
asked for. The feature and attention maps are the last sample's only (a captured output keeps its last batch item)
and the statistics are of the whole batch: the views say so rather than show them as another sample's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ghostviewer.gui.data.step_data import read_rgb
from ghostviewer.record import RecordError, RunRecord
from ghostviewer.record.samples import first_nonfinite
from ghostviewer.record.types import CALLBACK_LATENTS

THUMB_MAX_PX = 256  # a sample's image is kept at most this large for the strip (the final pane reads its own)
KIND_WORDS = {"nan": "NaN", "inf": "Inf"}
MODULE_WORDS = {CALLBACK_LATENTS: "your step callback"}  # the caller's own code, said so (and short enough for a tile)
STEP_DATA_SAMPLE = 0  # the sample whose step tensors a record made before every sample's were kept has


@dataclass(frozen=True)
class Sample:
    index: int
    count: int
    image: np.ndarray | None  # (H, W, 3) uint8, at most THUMB_MAX_PX a side; None: not written / unreadable
    verdict: dict[str, Any]
    anomaly: dict[str, Any] | None  # where this image first showed NaN/Inf (None: never)
    # the per-sample NaN/Inf table's count for this image: {"outputs": N, "steps": [first, last]} (None: no table)
    nonfinite: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return str(self.verdict.get("label") or "?")

    @property
    def badge_kind(self) -> str:
        """The verdict badge's colour: bad (the image failed), warn (it passed, NaN/Inf inside it), ok."""
        if self.label != "ok":
            return "bad" if self.label != "?" else "none"
        return "warn" if self.anomaly else "ok"

    @property
    def words(self) -> str:
        return sample_words(self.index, self.count, self.label, self.anomaly)

    @property
    def spread(self) -> str:
        """'NaN/Inf in 56 outputs, steps 2–3' from the per-sample table ("" without one, or when it never went bad)."""
        if not self.nonfinite or not self.nonfinite.get("outputs"):
            return ""
        outputs, steps = int(self.nonfinite["outputs"]), self.nonfinite.get("steps") or []
        said = f"NaN/Inf in {outputs} output{'s' if outputs != 1 else ''}"
        if len(steps) == 2:
            said += f", step {steps[0]}" if steps[0] == steps[1] else f", steps {steps[0]}–{steps[1]}"
        return said

    @property
    def image_name(self) -> str:
        return final_name(self.index)


@dataclass(frozen=True)
class Batch:
    samples: tuple[Sample, ...] = ()
    problem: str = ""  # why the batch could not be read ("" when it was)

    @property
    def count(self) -> int:
        return len(self.samples)


NO_BATCH = Batch()


def final_name(index: int) -> str:
    """The record's image name of a sample's final image (engine/run/recorder.py)."""
    return "final" if index == 0 else f"final_{index}"


def anomaly_phrase(anomaly: dict[str, Any]) -> str:
    """'NaN at step 7 in unet.up_blocks.1', 'Inf in vae.decoder.conv_out (decode)'."""
    kind = str(anomaly.get("kind") or "anomaly")
    kind = KIND_WORDS.get(kind, kind)
    module, step = anomaly.get("module") or "?", anomaly.get("step")
    module = MODULE_WORDS.get(module, module)
    if step is None:
        return f"{kind} in {module} ({anomaly.get('phase') or '?'})"
    return f"{kind} at step {step} in {module}"


def sample_words(index: int, count: int, label: str, anomaly: dict[str, Any] | None) -> str:
    """'image 3 of 4: NaN at step 7 in unet.up_blocks.1', 'image 1 of 4: ok', 'image 2 of 4: blank'."""
    head = f"image {index + 1} of {count}"
    if anomaly:
        said = anomaly_phrase(anomaly)
        return f"{head}: {said}" if label in ("nan", "inf", "?") else f"{head}: {label} · {said}"
    return f"{head}: {label}"


def _thumb(image: np.ndarray | None) -> np.ndarray | None:
    if image is None:
        return None
    stride = -(-max(image.shape[:2]) // THUMB_MAX_PX)
    out = image[::stride, ::stride] if stride > 1 else image
    out = np.ascontiguousarray(out)
    out.setflags(write=False)
    return out


def read_batch(record: RunRecord) -> Batch:
    """The run's samples when it made more than one image (NO_BATCH for one); a worker thread calls this."""
    try:
        verdicts, anomalies = record.verdicts, record.sample_anomalies
        names = {f["name"] for f in record.files() if f["kind"] == "image"}
        batch = record.settings.get("batch")
    except RecordError as exc:
        return Batch(problem=f"the batch cannot be read: {exc}")
    finals = 1 + max((int(n[6:]) for n in names if n.startswith("final_") and n[6:].isdigit()), default=0)
    count = max(len(verdicts), finals if "final_1" in names else 0, batch if isinstance(batch, int) else 1)
    if count < 2:
        return NO_BATCH
    try:
        table = first_nonfinite(record, count)  # [] when the record has none
    except RecordError:
        table = []
    samples = []
    for index in range(count):
        try:
            image = read_rgb(record.image_path(final_name(index)))
        except RecordError:
            image = None
        verdict = verdicts[index] if index < len(verdicts) and len(verdicts) == count else {}
        anomaly = anomalies[index] if index < len(anomalies) else None
        found = table[index] if table else None
        if found is not None:  # the table names the step and module, as the run's own report does
            anomaly = {k: found[k] for k in ("phase", "step", "module", "kind")}
        nonfinite = ({"outputs": found["outputs"], "steps": found["steps"]} if found else {"outputs": 0}) \
            if table else None
        samples.append(Sample(index, count, _thumb(image), verdict, anomaly, nonfinite))
    return Batch(tuple(samples))
