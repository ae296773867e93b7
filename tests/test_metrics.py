"""/metrics' histogram of the probability mass the grammar's mask kept per decode step
(minisglang_mask_mass_kept), checked against the step view's own record of the same
request: the histogram's count is its number of masked steps, its sum their mass."""

import pytest
from fastapi.testclient import TestClient

import minisglang as sgl
from minisglang.server import create_app

REGEX = r'\{"name": "[a-z]{1,8}", "age": [0-9]{1,2}\}'
PROMPT = "Extract as JSON:"


def histogram(text: str, name: str) -> dict[str, float]:
    """The samples of histogram `name` in Prometheus text: {'le=0.01': n, ..., 'count': n, 'sum': x}."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            key = key[len(name) :]
            out[key.replace("_bucket{le=", "le=").replace('"', "").rstrip("}").lstrip("_")] = float(value)
    return out


@pytest.fixture(scope="module")
def engine():
    engine = sgl.Engine(stage="s2", max_total_tokens=2048)
    yield engine
    engine.shutdown()


def test_mass_kept_histogram_counts_each_constrained_step(engine):
    params = {"regex": REGEX, "temperature": 0, "max_new_tokens": 40}
    with TestClient(create_app(engine)) as client:
        name = "minisglang_mask_mass_kept"
        before = histogram(client.get("/metrics").text, name)
        assert before["count"] == 0 and before["le=+Inf"] == 0 and before["sum"] == 0
        client.post("/generate", json={"text": "2024-", "sampling_params": {"temperature": 0, "max_new_tokens": 4}})
        assert histogram(client.get("/metrics").text, name)["count"] == 0, "an unconstrained step keeps no sample"
        r = client.post("/generate", json={"text": PROMPT, "sampling_params": params})
        assert r.status_code == 200
        after = histogram(client.get("/metrics").text, name)
        # The step view of the same request (s2 has no jumps: one masked step per token).
        trace = sgl.trace(engine, PROMPT, params)
    assert trace.output_text == r.json()["text"]
    assert after["count"] == len(trace.steps)
    assert after["sum"] == pytest.approx(sum(trace.mass_kept()), rel=1e-4)
    masses = trace.mass_kept()
    for key, count in after.items():
        if key.startswith("le=") and key != "le=+Inf":
            bound = float(key[3:])
            if all(abs(m - bound) > 1e-4 for m in masses):  # (two roundings may part at a bound)
                assert count == sum(m <= bound for m in masses), key
    assert after["le=+Inf"] == len(masses)


def test_the_newest_app_on_an_engine_counts(engine):
    """Two apps on one engine (tests make many): the newest one's histogram counts, and the
    engine keeps one recorder, not one per app ever made."""
    with TestClient(create_app(engine)) as a, TestClient(create_app(engine)) as b:
        b.post("/generate", json={"text": PROMPT, "sampling_params": {"regex": "[0-9]{3}", "temperature": 0}})
        counts = [histogram(c.get("/metrics").text, "minisglang_mask_mass_kept")["count"] for c in (a, b)]
    assert counts[0] == 0 and counts[1] >= 1
    assert type(engine.scheduler.step_recorder).__name__ == "MassKept"
