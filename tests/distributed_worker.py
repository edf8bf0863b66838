"""One process of tests/test_distributed.py: `python distributed_worker.py RANK WORLD INIT_FILE OUT_JSON`.
Runs the collectives and a DistributedDataParallel training on tvk and writes what it saw."""
import json
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import torchvk

rank, world, init_file, out_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("cpu:gloo,tvk:tvk", init_method=f"file://{init_file}", rank=rank, world_size=world)
seen = {"backend": dist.get_backend()}

t = torch.arange(6, dtype=torch.float32, device="tvk").view(2, 3) + rank
dist.all_reduce(t)
seen["all_reduce_sum"] = t.cpu().tolist()
m = torch.tensor([rank, -rank], dtype=torch.int64, device="tvk")
dist.all_reduce(m, op=dist.ReduceOp.MAX)
seen["all_reduce_max_int64"] = m.cpu().tolist()
a = torch.full((2,), float(rank + 1), device="tvk")
dist.all_reduce(a, op=dist.ReduceOp.AVG)
seen["all_reduce_avg"] = a.cpu().tolist()
b = torch.full((3,), float(rank + 10), device="tvk").t()
dist.broadcast(b, src=world - 1)
seen["broadcast"] = b.cpu().tolist()
outs = [torch.empty(2, device="tvk") for _ in range(world)]
dist.all_gather(outs, torch.full((2,), float(rank + 1), device="tvk"))
seen["all_gather"] = [o.cpu().tolist() for o in outs]
big = torch.empty(2 * world, device="tvk")
dist.all_gather_into_tensor(big, torch.full((2,), float(rank), device="tvk"))
seen["all_gather_into_tensor"] = big.cpu().tolist()
rs = torch.empty(2, device="tvk")
dist.reduce_scatter(rs, [torch.full((2,), float(10 * r + rank), device="tvk") for r in range(world)])
seen["reduce_scatter"] = rs.cpu().tolist()
rst = torch.empty(2, device="tvk")
dist.reduce_scatter_tensor(rst, torch.arange(2 * world, dtype=torch.float32, device="tvk") * (rank + 1))
seen["reduce_scatter_tensor"] = rst.cpu().tolist()
c = torch.tensor([float(rank)])
dist.all_reduce(c)  # a CPU tensor in the same group
seen["cpu_all_reduce"] = c.tolist()
dist.barrier()
try:
    dist.reduce(torch.ones(2, device="tvk"), dst=0)
except NotImplementedError as e:
    seen["reduce_error"] = str(e)

# data parallel: each rank trains on its half of the batch; DDP averages the gradients
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).to("tvk")
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
per = 8 // world
xs, ys = x[rank * per:(rank + 1) * per].to("tvk"), y[rank * per:(rank + 1) * per].to("tvk")
torchvk.reset_op_counts()
for _ in range(3):
    opt.zero_grad()
    F.cross_entropy(ddp(xs), ys).backward()
    opt.step()
seen["params"] = [p.detach().cpu().tolist() for p in model.parameters()]
seen["cpu_ops"] = torchvk.op_counts()["cpu"]
dist.destroy_process_group()
with open(out_file, "w") as f:
    json.dump(seen, f)
