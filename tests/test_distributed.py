"""torch.distributed on tvk (torchvk/distributed.py): two processes on this machine's device run
every collective and a DistributedDataParallel training; results equal the arithmetic, and the
trained parameters equal one process training on the whole batch."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

WORLD = 2
WORKER = os.path.join(os.path.dirname(__file__), "distributed_worker.py")


@pytest.fixture(scope="session")  # session: xdist may interleave other modules' tests
def seen(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    procs = [subprocess.Popen([sys.executable, WORKER, str(r), str(WORLD), str(tmp / "init"), str(tmp / f"{r}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(WORLD)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    return [json.loads((tmp / f"{r}.json").read_text()) for r in range(WORLD)]


pytestmark = pytest.mark.xdist_group("distributed")  # one pair of processes for the module


def test_collectives_on_tvk_tensors(seen):
    for rank, s in enumerate(seen):
        assert s["backend"] == "cpu:gloo,tvk:tvk"
        base = torch.arange(6, dtype=torch.float32).view(2, 3)
        assert s["all_reduce_sum"] == (base * WORLD + sum(range(WORLD))).tolist()
        assert s["all_reduce_max_int64"] == [WORLD - 1, 0]
        assert s["all_reduce_avg"] == [sum(range(1, WORLD + 1)) / WORLD] * 2
        assert s["broadcast"] == [float(WORLD - 1 + 10)] * 3
        assert s["all_gather"] == [[float(r + 1)] * 2 for r in range(WORLD)]
        assert s["all_gather_into_tensor"] == [float(r) for r in range(WORLD) for _ in range(2)]
        # rank r keeps the sum over senders s of (10 r + s)
        assert s["reduce_scatter"] == [float(sum(10 * rank + src for src in range(WORLD)))] * 2
        total = torch.arange(2 * WORLD, dtype=torch.float32) * sum(range(1, WORLD + 1))
        assert s["reduce_scatter_tensor"] == total[2 * rank:2 * rank + 2].tolist()
        assert s["cpu_all_reduce"] == [float(sum(range(WORLD)))]
        assert "does not implement reduce yet" in s["reduce_error"]


def test_data_parallel_training_equals_one_process_on_the_whole_batch(seen):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    for s in seen:
        assert s["cpu_ops"] == {}
        for got, ref in zip(s["params"], model.parameters()):
            torch.testing.assert_close(torch.tensor(got), ref.detach(), rtol=1e-5, atol=1e-6)
