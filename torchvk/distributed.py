"""torch.distributed on tvk: the `tvk` process-group backend.

`import torchvk` registers it, so data-parallel training works as on CUDA:

    dist.init_process_group("cpu:gloo,tvk:tvk")      # or just "tvk"
    model = DistributedDataParallel(model.to("tvk"))

Each collective stages through the host: the tvk tensors are copied into one flat CPU buffer
(one readback per call, whatever the number of tensors), Gloo runs the collective between the
processes, and the result is written back with one upload. DistributedDataParallel already
packs gradients into buckets (25 MiB by default), so a training step issues a few transfers,
not one per parameter. Collectives are synchronous: the returned work is already complete.
"""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

BACKEND = "tvk"


def _flat_cpu(tensors) -> torch.Tensor:
    """The tensors, flattened and concatenated on the CPU (one device readback)."""
    if len(tensors) == 1:
        return tensors[0].detach().reshape(-1).cpu()
    return torch.cat([t.detach().reshape(-1) for t in tensors]).cpu()


def _write_back(tensors, flat: torch.Tensor):
    """Copy consecutive pieces of the CPU buffer `flat` into the tvk tensors (one upload)."""
    staged = flat.to(tensors[0].device)
    start = 0
    for t in tensors:
        n = t.numel()
        t.copy_(staged[start:start + n].view(t.shape))
        start += n


def _done(result) -> c10d.Work:
    fut = torch.futures.Future()
    fut.set_result(result)
    return c10d._create_work_from_future(fut)


def _same_dtype(tensors, what: str):
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise TypeError(f"torchvk.distributed {what}: tensors of one call must share a dtype, got "
                        f"{sorted(map(str, dtypes))}")


class TVKProcessGroup(dist.ProcessGroup):
    """A process group for tvk tensors (and CPU ones): host staging around a Gloo backend on the
    same store. (torch takes a process group returned by a plugin as the whole group, so CPU
    tensors pass straight to Gloo.)"""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self._gloo = c10d.ProcessGroupGloo(c10d.PrefixStore("tvk", store), rank, size, timeout)

    def getBackendName(self):
        return BACKEND

    def _run(self, work):
        work.wait()

    # ------------------------------------------------------------------ collectives
    def _allreduce_flat(self, flat: torch.Tensor, opts):
        """Gloo's allreduce of a CPU tensor in place; AVG (which Gloo lacks) as SUM / size."""
        o = c10d.AllreduceOptions()
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        average = op == dist.ReduceOp.AVG
        o.reduceOp = dist.ReduceOp.SUM if average else op
        self._run(self._gloo.allreduce([flat], o))
        if average:
            flat.div_(self.size())

    def allreduce(self, tensors, opts=None):
        _same_dtype(tensors, "allreduce")
        flat = _flat_cpu(tensors)
        self._allreduce_flat(flat, opts)
        _write_back(tensors, flat)
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        _same_dtype(tensors, "broadcast")
        flat = _flat_cpu(tensors)
        o = c10d.BroadcastOptions()
        if opts is not None:
            o.rootRank, o.rootTensor = opts.rootRank, 0
        self._run(self._gloo.broadcast([flat], o))
        _write_back(tensors, flat)
        return _done(tensors)

    def allgather(self, output_lists, inputs, opts=None):
        if len(inputs) != 1:
            raise ValueError("torchvk.distributed allgather takes one input tensor per process")
        src = inputs[0].detach().cpu()
        gathered = [torch.empty_like(src) for _ in range(self.size())]
        self._run(self._gloo.allgather([gathered], [src]))
        _write_back(output_lists[0], torch.cat([g.reshape(-1) for g in gathered]))
        return _done(output_lists)

    def _allgather_base(self, output, input, opts=None):
        src = input.detach().reshape(-1).cpu()
        out = torch.empty(src.numel() * self.size(), dtype=src.dtype)
        self._run(self._gloo._allgather_base(out, src))
        _write_back([output], out)
        return _done([output])

    all_gather_single = _allgather_base  # torch 2.13's name

    def reduce_scatter(self, outputs, input_lists, opts=None):
        if len(outputs) != 1:
            raise ValueError("torchvk.distributed reduce_scatter takes one output tensor per process")
        # a reduce_scatter is an allreduce of the concatenation, of which each rank keeps its piece
        _same_dtype(input_lists[0], "reduce_scatter")
        flat = _flat_cpu(input_lists[0])
        self._allreduce_flat(flat, opts)
        n = outputs[0].numel()
        _write_back(outputs, flat[self.rank() * n:(self.rank() + 1) * n])
        return _done(outputs)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter([output], [list(input.reshape(self.size(), -1).unbind(0))], opts)

    reduce_scatter_single = _reduce_scatter_base  # torch 2.13's name

    def barrier(self, opts=None):
        torch.tvk.synchronize()
        self._run(self._gloo.barrier())
        return _done(None)


def _not_yet(name):
    def collective(self, *args, **kwargs):
        raise NotImplementedError(
            f"torchvk.distributed does not implement {name} yet (it has all_reduce, broadcast, all_gather, "
            f"all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor and barrier); use all_reduce, or "
            f"run {name} on CPU copies of the tensors")
    return collective


# collectives not staged yet: a clear error instead of c10d's "no backend for device type"
for _method, _name in (("reduce", "reduce"), ("gather", "gather"), ("scatter", "scatter"), ("send", "send"),
                       ("recv", "recv"), ("alltoall", "all_to_all"), ("alltoall_base", "all_to_all_single"),
                       ("all_to_all_single", "all_to_all_single")):
    setattr(TVKProcessGroup, _method, _not_yet(_name))


def _create(store, rank, size, timeout):
    return TVKProcessGroup(store, rank, size, timeout)


def register():
    """Register the `tvk` backend with torch.distributed (done by `import torchvk`)."""
    if dist.is_available() and BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, devices=[BACKEND])
