#!/usr/bin/env python3
"""PyTorch's own context parallel, the peer of `trainyard train --cp N`
(issue 31): a long-sequence Llama training step with every sequence split
over the "cp" ranks, as torchtitan lays it out.

Run under torchrun (torchrun --nproc_per_node 4 bench/pytorch_cp_train.py
--model llama-8b --seq 131072 --cp 4 ...). The model is a plain Llama
written here (RMSNorm, RoPE with Llama 3's frequency scaling, GQA, SwiGLU),
its attention one F.scaled_dot_product_attention(is_causal=True) call per
layer, so that context parallel's SDPA dispatch takes it: transformers'
Llama builds a mask and position ids of the local chunk, which context
parallel does not shard. Its layout:

- mesh (dp, cp) = (world / cp, cp); FSDP2 (fully_shard, one unit per
  decoder layer, then the root) over the flattened dp x cp mesh: parameters,
  gradients and optimizer state sharded over every rank that holds the same
  weights (Trainyard's --zero 2 shards the optimizer state and the gradient
  accumulators over the same ranks; its weights stay whole);
- torch.distributed.tensor.experimental.context_parallel over the cp mesh:
  input ids, targets and position ids sharded along the sequence with the
  head-tail load balance (rank r holds chunks r and 2N-1-r, as --cp does),
  SDPA's keys and values passed around the ring (set_rotate_method:
  allgather by default, --rotate alltoall);
- every decoder layer checkpointed (torch.utils.checkpoint, non-reentrant:
  Trainyard's --recompute layer), the loss over --loss-chunk tokens at a
  time, each chunk's head and cross entropy checkpointed (--loss-chunk);
- bf16 autocast over f32 parameters (bf16-mixed); AdamW (fused; lr 6e-4,
  betas 0.9/0.95, weight decay 0.1 on matrices), clip 1.0 (not Adafactor:
  torch.optim.Adafactor does not take FSDP2's sharded parameters).

Random token ids, the same rows on the cp ranks of a replica. Timing: wall
time per step on rank 0 after a barrier, CUDA-synchronized; median over the
timed steps; tokens/s counts every replica's rows once. Peak memory:
torch.cuda.max_memory_allocated, the largest rank's.

--device cpu (gloo, f32) runs the same code with --model tiny and --cp 1
(context parallel's SDPA handler has no CPU kernel), to check the script
where there is no GPU. Prints one "RESULT pytorch-cp..." line from rank 0.
"""
import argparse
import math
import os
import statistics
import sys

PRESETS = {
    # Llama-3.2-1B and Llama-3.1-8B (Trainyard's presets llama-1b, llama-8b)
    "llama-1b": dict(vocab=128256, layers=16, hidden=2048, heads=32, kv=8, ffn=8192,
                     theta=500000.0, factor=32.0, tied=True, eps=1e-5),
    "llama-8b": dict(vocab=128256, layers=32, hidden=4096, heads=32, kv=8, ffn=14336,
                     theta=500000.0, factor=8.0, tied=False, eps=1e-5),
    "tiny": dict(vocab=512, layers=2, hidden=64, heads=4, kv=2, ffn=128,
                 theta=10000.0, factor=0.0, tied=True, eps=1e-5),
}


def rope_frequencies(torch, p, head_dim):
    """inv_freq with Llama 3's scaling (low 1, high 4, original 8192)."""
    inv = 1.0 / (p["theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if p["factor"] > 0:
        low, high, original = 1.0, 4.0, 8192.0
        wavelen = 2 * math.pi / inv
        smooth = (original / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > original / low, inv / p["factor"], inv)
        mid = (wavelen <= original / low) & (wavelen >= original / high)
        inv = torch.where(mid, (1 - smooth) * inv / p["factor"] + smooth * inv, scaled)
    return inv.float()


def make_model(torch, p):
    nn, F = torch.nn, torch.nn.functional
    C, H, KV = p["hidden"], p["heads"], p["kv"]
    D = C // H

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            x32 = x.float()
            y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + p["eps"])
            return (y * self.weight).to(x.dtype)

    def rotate(x, cos, sin):  # x [B, h, T, D], cos/sin [B, 1, T, D]: the halves convention
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = RMSNorm()
            self.q = nn.Linear(C, H * D, bias=False)
            self.k = nn.Linear(C, KV * D, bias=False)
            self.v = nn.Linear(C, KV * D, bias=False)
            self.o = nn.Linear(H * D, C, bias=False)
            self.mlp_norm = RMSNorm()
            self.gate = nn.Linear(C, p["ffn"], bias=False)
            self.up = nn.Linear(C, p["ffn"], bias=False)
            self.down = nn.Linear(p["ffn"], C, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            h = self.attn_norm(x)
            q = self.q(h).view(B, T, H, D).transpose(1, 2)
            k = self.k(h).view(B, T, KV, D).transpose(1, 2)
            v = self.v(h).view(B, T, KV, D).transpose(1, 2)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            # whole heads for SDPA (context parallel's ring takes the MHA form)
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
            h = self.mlp_norm(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(p["vocab"], C)
            self.layers = nn.ModuleList(Block() for _ in range(p["layers"]))
            self.norm = RMSNorm()
            self.head = None if p["tied"] else nn.Linear(C, p["vocab"], bias=False)
            self.register_buffer("inv_freq", rope_frequencies(torch, p, D), persistent=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)

        def forward(self, ids, tgt, positions, recompute, loss_chunk):
            """This rank's mean cross entropy of its tokens (the root's
            forward, so FSDP gathers the embedding, norm and head first)."""
            from torch.utils.checkpoint import checkpoint
            x = self.embed(ids)
            freqs = positions.float().unsqueeze(-1) * self.inv_freq  # [B, T_local, D/2]
            cos = torch.cat((freqs.cos(), freqs.cos()), dim=-1).unsqueeze(1).to(x.dtype)
            sin = torch.cat((freqs.sin(), freqs.sin()), dim=-1).unsqueeze(1).to(x.dtype)
            for block in self.layers:
                if recompute:
                    x = checkpoint(block, x, cos, sin, use_reentrant=False)
                else:
                    x = block(x, cos, sin)
            h = self.norm(x)
            w = self.embed.weight if self.head is None else self.head.weight
            vocab = w.shape[0]

            def chunk_loss(hs, ts, w):
                logits = F.linear(hs, w).float()
                return F.cross_entropy(logits.view(-1, vocab), ts.reshape(-1), reduction="sum")

            step = loss_chunk if loss_chunk > 0 else h.shape[1]
            total = 0.0
            for s in range(0, h.shape[1], step):
                total = total + checkpoint(chunk_loss, h[:, s:s + step], tgt[:, s:s + step], w,
                                           use_reentrant=False)
            return total / tgt.numel()

    return Llama()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-8b", choices=sorted(PRESETS))
    ap.add_argument("--seq", type=int, default=131072, help="tokens per row (whole sequence)")
    ap.add_argument("--batch", type=int, default=1, help="rows per replica")
    ap.add_argument("--cp", type=int, default=1, help="ranks each sequence is split over")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--optimizer", default="adamw", choices=("adamw",),
                    help="AdamW only: torch.optim.Adafactor does not take FSDP2's sharded "
                         "parameters (its in-place pow_ on a DTensor partial fails)")
    ap.add_argument("--loss-chunk", type=int, default=4096, metavar="N",
                    help="tokens per checkpointed head + cross-entropy chunk (0: whole)")
    ap.add_argument("--rotate", default="allgather", choices=("allgather", "alltoall"))
    ap.add_argument("--no-recompute", action="store_true",
                    help="keep every layer's activations (no checkpointing)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.distributed.tensor
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = a.device == "cuda"
    if world % a.cp:
        raise SystemExit(f"--cp {a.cp} does not divide the world of {world} ranks")
    if a.seq % (2 * a.cp):
        raise SystemExit(f"--seq {a.seq} is not a multiple of 2 x --cp {a.cp}")
    if a.cp > 1 and not cuda:
        raise SystemExit("--cp > 1 needs --device cuda: context parallel's SDPA handler has no "
                         "CPU kernel")
    if cuda:
        torch.cuda.set_device(local)
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    dp = world // a.cp
    mesh = init_device_mesh("cuda" if cuda else "cpu", (dp, a.cp), mesh_dim_names=("dp", "cp"))
    shard_mesh = mesh["dp", "cp"]._flatten("dp_cp")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(1234)  # the same initial model on every rank

    p = PRESETS[a.model]
    with torch.device("meta"):
        model = make_model(torch, p)
    for block in model.layers:
        fully_shard(block, mesh=shard_mesh)
    fully_shard(model, mesh=shard_mesh)
    model.to_empty(device=dev)
    # initialized after sharding (an 8B model never exists whole on a rank):
    # every rank draws the whole tensor from the same seed and keeps its
    # shard, so the model is the one a single process would make
    with torch.no_grad():
        for name, q in model.named_parameters():
            full = torch.empty(q.shape, device=dev)
            if name.endswith("norm.weight"):
                full.fill_(1.0)
            else:
                full.normal_(0.0, 0.02)
            q.copy_(torch.distributed.tensor.distribute_tensor(full, q.device_mesh, q.placements))
            del full
        model.inv_freq.copy_(rope_frequencies(torch, p, p["hidden"] // p["heads"]).to(dev))
    model.train()

    decay = [q for n, q in model.named_parameters() if q.dim() == 2 and "embed" not in n]
    rest = [q for n, q in model.named_parameters() if not (q.dim() == 2 and "embed" not in n)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)

    V, T = p["vocab"], a.seq
    dp_rank = mesh["dp"].get_local_rank()
    g = torch.Generator(device=dev).manual_seed(1 + dp_rank)  # one row set per replica
    idx = torch.randint(0, V, (a.batch, T), generator=g, device=dev)
    targets = torch.randint(0, V, (a.batch, T), generator=g, device=dev)
    pos = torch.arange(T, device=dev).unsqueeze(0).expand(a.batch, T).contiguous()

    if a.cp > 1:
        from torch.distributed.tensor.experimental import context_parallel
        from torch.distributed.tensor.experimental._attention import set_rotate_method
        set_rotate_method(a.rotate)

        def cp_context(bufs):  # shards bufs in place along the sequence
            return context_parallel(mesh["cp"], buffers=bufs, buffer_seq_dims=[1] * len(bufs),
                                    no_restore_buffers=set(bufs))
    else:
        import contextlib

        def cp_context(bufs):
            return contextlib.nullcontext()

    tag = "pytorch-cp%d-fsdp-%s%s" % (a.cp, a.optimizer, "" if cuda else "-cpu")
    nparams = sum(q.numel() for q in model.parameters())
    if rank == 0:
        name = torch.cuda.get_device_name() if cuda else "cpu"
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else "-"
        print(f"device:     {world} x {name}; torch {torch.__version__}; NCCL {nccl}; {tag}, "
              f"{'bf16-mixed' if cuda else 'f32'}, dp {dp} x cp {a.cp}", flush=True)
        print(f"model:      {a.model} ({nparams} parameters) B={a.batch} per replica T={T}, "
              f"recompute {'none' if a.no_recompute else 'layer'}, loss chunk {a.loss_chunk}",
              flush=True)

    def step():
        opt.zero_grad(set_to_none=True)
        # this step's rows, whole; context parallel shards them in place (a
        # data loader's batch would be new every step too)
        bufs = [idx.clone(), targets.clone(), pos.clone()]
        with cp_context(bufs):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                loss = model(*bufs, not a.no_recompute, a.loss_chunk)
            loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if hasattr(gnorm, "full_tensor"):
            gnorm = gnorm.full_tensor()
        opt.step()
        lv = loss.detach().clone()
        dist.all_reduce(lv)  # the ranks' means of equal token counts
        return lv.item() / world, float(gnorm)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from pytorch_dist_train import timed_steps
    times, peak = timed_steps(step, a.warmup, a.steps, rank, dev)
    med = statistics.median(times)
    tok = a.batch * T * dp / med
    if rank == 0:
        print(f"ms/step:    median {med * 1e3:.1f}  min {min(times) * 1e3:.1f}  max "
              f"{max(times) * 1e3:.1f}")
        print(f"tokens/s:   {tok:.0f} ({tok / world:.0f} per GPU); peak memory "
              f"{peak.item():.0f} MiB (largest rank)")
        print(f"RESULT {tag} model={a.model} world={world} cp={a.cp} B={a.batch} T={T} "
              f"median_ms={med * 1e3:.1f} tok_s={tok:.1f} peak_mib={peak.item():.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
