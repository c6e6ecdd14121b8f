"""A reference side by side: the first output where a suspect leaves the reference's range, and by how much."""

from __future__ import annotations

from dataclasses import replace

from ghostviewer.analysis.reference import LIMITS, first_departure, headroom
from ghostviewer.record import StatRow

MEAN_SHIFT, CHANNEL_SHIFT = LIMITS["decode"]["mean"], LIMITS["decode"]["channel"]


def _rows(gains: dict[tuple[int | None, str], float] | None = None, shift: float = 0.0) -> list[StatRow]:
    rows = [StatRow("encode", None, "text_encoder", 0, 0, (1, 8, 16), "float32", -3, 3, 0.1, 1.0, 3.0, 0, 0)]
    for step in range(3):
        for module in ("unet.down", "unet.mid", "unet.up"):
            g = (gains or {}).get((step, module), 1.0)
            rows.append(StatRow("denoise", step, module, 0, len(rows), (2, 4, 8, 8), "float32", -4 * g, 4 * g,
                                0.0, 1.0 * g, 4.0 * g, 0, 0))
    rows.append(StatRow("decode", None, "vae.decoder", 0, len(rows), (1, 3, 64, 64), "float32", -1, 1, 0.0 + shift,
                        0.5, 1.0, 0, 0))
    return rows


def test_a_healthy_difference_is_within_range() -> None:
    near = _rows({(s, m): 1.1 for s in range(3) for m in ("unet.down", "unet.mid", "unet.up")})
    assert first_departure(near, _rows()) is None
    assert all(value < LIMITS["middle"]["std"] for key, (value, _) in headroom(near, _rows()).items()
               if key.endswith("/std"))


def test_the_first_departure_in_execution_order_is_named_with_its_ratio() -> None:
    big = 1.5 * max(limits["absmax"] for limits in LIMITS.values())
    suspect = _rows({(1, "unet.mid"): big, (1, "unet.up"): big, (2, "unet.mid"): big})
    found = first_departure(suspect, _rows())
    assert found is not None
    assert (found["phase"], found["step"], found["module"]) == ("denoise", 1, "unet.mid")
    assert found["stat"] in ("std", "absmax") and found["ratio"] == round(big, 4)


def test_a_mean_shift_and_a_channel_shift_are_departures() -> None:
    found = first_departure(_rows(shift=MEAN_SHIFT), _rows())  # the decoder's std is 0.5: twice the limit
    assert found is not None and found["module"] == "vae.decoder" and found["stat"] == "mean"
    assert found["ratio"] == 2 * MEAN_SHIFT and found["unit"] == "reference std"
    channels = {("decode", "vae.decoder"): [CHANNEL_SHIFT, 0.0, -CHANNEL_SHIFT]}
    found = first_departure(_rows(), _rows(), channels, {("decode", "vae.decoder"): [0.0, 0.0, 0.0]})
    assert found is not None and found["stat"] == "channel_mean[0]"


def test_nan_in_the_suspect_only_departs_and_unmatched_outputs_are_skipped() -> None:
    suspect = _rows()
    suspect[4] = replace(suspect[4], nan_count=3)
    found = first_departure(suspect, _rows())
    assert found is not None and found["stat"] == "nan" and found["module"] == suspect[4].module
    other_shape = [replace(r, shape=(9,)) for r in _rows({(0, "unet.down"): 50.0})]
    assert first_departure(other_shape, _rows()) is None


def test_a_module_off_the_same_way_at_every_step_is_a_persistent_departure() -> None:
    from ghostviewer.analysis.reference import PERSISTENT_RATIO, earliest, persistent_departure, persistent_ratios

    steps = 8
    reference = _steps_rows(steps, {})
    wobble = {(k, "unet.mid"): (1.1 if k % 2 else 1 / 1.1) for k in range(steps)}  # healthy: this way, then that
    assert persistent_departure(_steps_rows(steps, wobble), reference) is None
    edited = {(k, "unet.mid"): PERSISTENT_RATIO * 1.2 for k in range(steps)}
    edited.update({(k, "unet.up"): PERSISTENT_RATIO * 1.2 for k in range(steps)})  # what follows inherits it
    found = persistent_departure(_steps_rows(steps, edited), reference)
    assert found is not None and found["module"] == "unet.mid" and found["step"] == 0
    assert round(persistent_ratios(_steps_rows(steps, edited), reference)["unet.mid"], 3) == round(
        PERSISTENT_RATIO * 1.2, 3)
    late = {"phase": "denoise", "step": 5, "module": "unet.down"}
    assert earliest([late, found, None], _steps_rows(steps, edited)) is found


def _steps_rows(steps: int, gains: dict[tuple[int, str], float]) -> list[StatRow]:
    rows = []
    for step in range(steps):
        for module in ("unet.down", "unet.mid", "unet.up"):
            g = gains.get((step, module), 1.0)
            rows.append(StatRow("denoise", step, module, 0, len(rows), (2, 4, 8, 8), "float32", -4, 4, 0.0, g, 4.0,
                                0, 0))
    return rows
