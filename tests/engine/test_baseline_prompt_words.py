"""A baseline speaks for the prompts it was built from: the encode phase's channel subspace (fitted to those prompts'
encodings) does not judge a prompt with a word they never had — the false alarm of a healthy "two green circles" on
the demo — while a text encoder edited for real is still found on the baseline's own words
(tests/engine/test_text_encoder_config.py); a baseline build lists its prompts' tokens
(tests/engine/test_baseline_build.py)."""

from __future__ import annotations

from pathlib import Path

from ghostviewer import api
from ghostviewer.analysis.baseline import PROMPT_TOKENS, Baseline
from ghostviewer.analysis.baseline_file import load_baseline
from ghostviewer.demo.baseline_prompts import baseline_prompts
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.tracing.prompt_tokens import token_ids
from ghostviewer.record import RunRecord

SHIPPED = Path(__file__).resolve().parents[2] / "resources" / "baselines" / "6cfa9657ba199fbf.json"
NOTE = "the prompt has words the baseline's prompts never had"


def test_the_shipped_baseline_lists_the_tokens_of_its_prompts(demo_loaded: LoadedPipeline) -> None:
    baseline = load_baseline(SHIPPED)
    assert baseline.meta[PROMPT_TOKENS] == token_ids(demo_loaded.pipe, sorted(set(baseline_prompts(240))))
    assert baseline.covers_prompt(token_ids(demo_loaded.pipe, "a red circle on a blue background"))
    assert not baseline.covers_prompt(token_ids(demo_loaded.pipe, "two green circles"))
    old = Baseline(baseline.identity, baseline.settings, baseline.buckets, baseline.modules, baseline.image)
    assert old.covers_prompt([10_000])  # saved without the list: every prompt is judged, as before


def test_a_prompt_with_new_words_is_not_a_text_encoder_drift(demo_loaded: LoadedPipeline, tmp_path: Path) -> None:
    result = api.run(demo_loaded.pipe, "two green circles", steps=20, runs_dir=tmp_path, device="cpu",
                     baseline=SHIPPED)
    assert result["first_anomaly"] is None, result["first_anomaly"]  # was: drift, text_encoder.encoder.layers.1
    notes = [e.message for e in RunRecord(result["run_dir"]).events() if e.kind == "baseline"]
    assert any(NOTE in note for note in notes), notes

