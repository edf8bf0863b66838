"""Ctrl-C (KeyboardInterrupt) at any point of a training step on tvk reaches the user as
KeyboardInterrupt (as on the CPU, inside backward too) and leaves the runtime usable: no lock held,
no command buffer submitted and never waited for, no validation message, and the next steps train on
as the CPU does. Each group runs in tests/interrupt_worker.py, in a process of its own: before the
fix a Ctrl-C aborted the process ("terminate called without an active exception") or crashed it."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "interrupt_worker.py"


def _run(group: str) -> dict:
    out = subprocess.run([sys.executable, str(WORKER), group], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"the {group} worker died (rc {out.returncode}):\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("group, at_least", [("eager", 60), ("runtime", 40), ("compiled", 24), ("timers", 3)])
def test_interrupted_training_raises_and_trains_on_like_the_cpu(group, at_least):
    result = _run(group)
    assert result["cpu_backward_interrupt"] == "KeyboardInterrupt"  # what plain torch raises inside backward
    scenarios = result["scenarios"]
    reached = [s for s in scenarios if s.get("reached", True)]  # injections whose call came in the step
    assert len(reached) >= at_least, [s["name"] for s in scenarios if s not in reached]
    failed = {s["name"]: s["problems"] for s in scenarios if s["problems"]}
    assert not failed, failed
    for s in scenarios:
        tvk, cpu = s["losses"]
        assert tvk == pytest.approx(cpu, rel=1e-4, abs=1e-5), s["name"]
