"""bench/durability.py in its tiny configuration (2 servers x 12 stores with a CLI writer, 2 kill -9
rounds, the torn-journal-line case): the JSON has its shape and not one acknowledged write is lost.
A harness that stopped checking would pass anything, so the test also holds it to having
acknowledged and verified writes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, server_env


@pytest.mark.slow
def test_durability_harness_tiny(tmp_path):
    out = tmp_path / "durability.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.durability", "--tiny", "--seed", "7", "--out", str(out)],
        cwd=ROOT,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.exists(), proc.stdout + proc.stderr
    res = json.loads(out.read_text())
    assert set(res) >= {"seed", "mode", "config", "multiprocess", "kill9", "corruption", "lost_total", "seconds"}
    assert res["seed"] == 7
    assert res["mode"] == "tiny"

    (mp,) = res["multiprocess"]
    assert mp["processes"] == 2
    assert mp["acked"] == 2 * 12, mp  # every store acknowledged
    assert mp["stale_checks"] == mp["acked"]
    assert mp["verified"] >= mp["acked"] - mp["forgotten_acked"]
    assert mp["lost"] == 0, mp["lost_ids"]
    assert mp["resurrected"] == 0
    assert mp["stale"] == 0, mp["stale_examples"]
    assert mp["forgotten_content_on_disk"] == 0, mp["forgotten_on_disk_ids"]
    assert mp["doctor_exit"] == 0, mp["doctor_first_error"]

    k9 = res["kill9"]
    assert k9["rounds"] == 2
    assert k9["start_failures"] == 0, k9["failures"]
    assert k9["acked_writes"] > 0
    assert k9["lost"] == 0, k9["failures"]
    assert k9["resurrected"] == 0, k9["failures"]
    assert k9["doctor_failures"] == 0, k9["failures"]
    assert k9["tmp_after_next_start"] == 0, k9["failures"]

    (torn,) = res["corruption"]
    assert torn["case"].startswith("journal: torn last line")
    assert torn["server_start"] == {"starts": True, "lost": 0, "resurrected": 0}
    assert torn["doctor_exit"] == 0

    assert res["lost_total"] == 0
    assert proc.returncode == 0, proc.stdout + proc.stderr
