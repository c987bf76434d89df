#!/usr/bin/env python3
"""PyTorch's data-parallel training step on several GPUs, the peer of
`trainyard train` under mpirun (tests/cuda/mp_check.sh, issue 17).

Run under torchrun (torchrun --nproc_per_node N bench/pytorch_dist_train.py
...): every rank trains the model of bench/pytorch_cuda_train.py's build()
(transformers' GPT-2 or LlamaForCausalLM, SDPA attention; llama-1b is
Llama-3.2-1B's shape: vocab 128256, GQA 32/8, tied, rope theta 500000) on
its own --batch rows, wrapped as

  --ddp    DistributedDataParallel (gradients all-reduced in buckets,
           overlapped with the backward), or
  --fsdp   FSDP2 (torch.distributed.fsdp.fully_shard; --fsdp-strategy full:
           FULL_SHARD, parameters, gradients and optimizer state sharded,
           parameters resharded after the forward; grad: SHARD_GRAD_OP, kept
           whole between forward and backward), one unit per decoder layer,

bf16 autocast over f32 parameters (bf16-mixed), fused AdamW (lr 6e-4, betas
0.9/0.95, weight decay 0.1 on matrices), clip 1.0, --compile wraps the model
in torch.compile (the warm-up steps pay for compiling). Random token ids,
fixed per rank. Timing: CUDA-synchronized wall time per step on rank 0
after a barrier; median over the timed steps; tokens/s counts every rank's
rows. Peak memory: torch.cuda.max_memory_allocated on each rank (the largest
printed).

--device cpu (gloo, f32, no compile) runs the same code on the CPU with a
small model, to check the script where there is no GPU.

Prints one "RESULT pytorch-..." line from rank 0.
"""
import argparse
import os
import statistics
import sys
import time


def timed_steps(step, warmup, steps, rank, dev):
    """warmup + steps calls of step() (-> loss, grad norm), each after a
    barrier and CUDA-synchronized on `dev`, printed on rank 0: the timed
    steps' seconds and the largest rank's peak memory in MiB (a 0-d tensor;
    0 on the CPU). Shared by bench/pytorch_cp_train.py."""
    import torch
    import torch.distributed as dist
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times = []
    for i in range(warmup + steps):
        if i == warmup and cuda:
            torch.cuda.reset_peak_memory_stats()
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        lv, gn = step()
        sync()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
        if rank == 0:
            print(f"step {i + 1:3d}{' (warm-up)' if i < warmup else ''}: {dt * 1e3:9.1f} ms  "
                  f"loss {lv:.4f}  grad_norm {gn:.3f}", file=sys.stderr, flush=True)
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0], device=dev)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return times, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-1b",
                    help="a preset of bench/pytorch_cuda_train.py (llama-1b, gpt2-124m, ...) "
                         "or tiny (a 2-layer Llama for --device cpu)")
    ap.add_argument("--batch", type=int, default=4, help="rows per rank")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--ddp", action="store_true")
    mode.add_argument("--fsdp", action="store_true")
    ap.add_argument("--fsdp-strategy", default="full", choices=("full", "grad"),
                    help="full: FULL_SHARD (reshard after forward); grad: SHARD_GRAD_OP")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pytorch_cuda_train as single

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1234)  # the same initial model on every rank

    if a.model == "tiny":
        single.PRESETS["tiny"] = dict(arch="llama", vocab=512, layers=2, hidden=64, heads=4,
                                      kv=2, ffn=128, positions=256)
    if a.model not in single.PRESETS:
        raise SystemExit(f"--model {a.model}: not one of {sorted(single.PRESETS)}")
    model, p = single.build(a.model, "sdpa")
    model.to(dev).train()
    if a.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        wrapped = DDP(model, device_ids=[local] if cuda else None)
        params = model.named_parameters()
    else:
        # FSDP2 (per-parameter sharding as DTensors): each decoder layer one
        # unit, then the root (embeddings, final norm, head)
        from torch.distributed.fsdp import fully_shard
        reshard = a.fsdp_strategy == "full"
        for m in model.modules():
            if type(m).__name__ in ("LlamaDecoderLayer", "GPT2Block"):
                fully_shard(m, reshard_after_forward=reshard)
        wrapped = fully_shard(model, reshard_after_forward=reshard)
        params = model.named_parameters()
    decay, no_decay = [], []
    for n, q in params:
        is_matrix = q.dim() == 2
        embedding = "wte" in n or "wpe" in n or "embed_tokens" in n
        (decay if is_matrix and not embedding else no_decay).append(q)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)
    fwd = torch.compile(wrapped) if a.compile and cuda else wrapped
    V = p["vocab"]
    g = torch.Generator(device=dev).manual_seed(1 + rank)
    idx = torch.randint(0, V, (a.batch, a.seq), generator=g, device=dev)
    targets = torch.randint(0, V, (a.batch, a.seq), generator=g, device=dev)
    nparams = sum(q.numel() for q in model.parameters())  # FSDP2: the whole (global) shapes
    tag = "pytorch-%s%s%s" % ("ddp" if a.ddp else "fsdp-" + a.fsdp_strategy,
                              "-compile" if a.compile and cuda else "", "" if cuda else "-cpu")
    if rank == 0:
        name = torch.cuda.get_device_name() if cuda else "cpu"
        print(f"device:     {world} x {name}; torch {torch.__version__}; {tag}, "
              f"{'bf16-mixed' if cuda else 'f32'}, fused AdamW, SDPA", flush=True)
        print(f"model:      {a.model} (~{nparams} parameters) B={a.batch} per rank T={a.seq}",
              flush=True)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logits = fwd(input_ids=idx).logits
            loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if hasattr(gnorm, "full_tensor"):  # FSDP2: a DTensor
            gnorm = gnorm.full_tensor()
        opt.step()
        return loss.item(), float(gnorm)

    times, peak = timed_steps(step, a.warmup, a.steps, rank, dev)
    med = statistics.median(times)
    tok = a.batch * a.seq * world / med
    if rank == 0:
        print(f"ms/step:    median {med * 1e3:.2f}  min {min(times) * 1e3:.2f}  max "
              f"{max(times) * 1e3:.2f}")
        print(f"tokens/s:   {tok:.0f} ({tok / world:.0f} per GPU); peak memory {peak.item():.0f} "
              f"MiB (largest rank)")
        print(f"RESULT {tag} model={a.model} world={world} B={a.batch} T={a.seq} "
              f"median_ms={med * 1e3:.2f} tok_s={tok:.1f} peak_mib={peak.item():.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
