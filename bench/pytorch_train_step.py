#!/usr/bin/env python3
"""PyTorch reference for bench/train_bench.c: one GPT-2 124M training step on
the CPU in f32 (forward, backward, clip_grad_norm_(1.0), AdamW), timed the
same way, so the two can be compared in the same run.

The model is transformers' GPT2LMHeadModel built from a GPT2Config (n_layer
12, n_head 12, n_embd 768, n_positions 1024, vocab 50257, dropout 0) when
transformers is installed (--model hf), else (--model manual, the default
when it is missing) a hand-written equivalent: the same parameters, shapes
and math (Conv1D weights [in, out], tanh GELU, pre-norm blocks, tied
lm_head, causal attention through F.scaled_dot_product_attention, which is
what GPT2LMHeadModel uses by default). Weight decay 0.1 on the matrices,
none on biases, LayerNorms and embeddings (as train_bench), lr 6e-4, betas
(0.9, 0.95), eps 1e-8, foreach AdamW (PyTorch's CPU default; --fused
selects the fused kernel, AdamW(fused=True), which torch has on the CPU
since 2.4). Tokens and targets are random ids fixed for the run.

Usage: pytorch_train_step.py [--batch B] [--seq T] [--steps N] [--warmup W]
       [--threads N] [--model manual|hf] [--compile] [--fused]
Prints the figures train_bench prints and one "RESULT pytorch..." line.
"""
import argparse
import math
import os
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB, LAYERS, HEADS, WIDTH, POSITIONS = 50257, 12, 12, 768, 1024


class Conv1D(nn.Module):
    """transformers' Conv1D: y = x @ W + b with W stored [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(
            *x.shape[:-1], self.weight.size(1))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.c_attn = Conv1D(WIDTH, 3 * WIDTH)
        self.c_proj = Conv1D(WIDTH, WIDTH)
        self.ln_2 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.c_fc = Conv1D(WIDTH, 4 * WIDTH)
        self.mlp_proj = Conv1D(4 * WIDTH, WIDTH)
        for p in (self.c_proj.weight, self.mlp_proj.weight):
            p.data.normal_(std=0.02 / math.sqrt(2 * LAYERS))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(POSITIONS, WIDTH)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH, eps=1e-5)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied lm_head
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def machine_busy_s():
    """Busy CPU seconds of the whole machine (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def build_model(kind):
    if kind == "hf":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=LAYERS, n_head=HEADS, n_embd=WIDTH, n_positions=POSITIONS,
                         vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(cfg)

        def loss_fn(m, idx, targets):
            logits = m(input_ids=idx).logits
            return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        decay = [p for n, p in model.named_parameters()
                 if p.dim() == 2 and "wte" not in n and "wpe" not in n]
    else:
        model = GPT2()

        def loss_fn(m, idx, targets):
            return m(idx, targets)
        decay = [p for n, p in model.named_parameters()
                 if p.dim() == 2 and not n.startswith(("wte", "wpe"))]
    ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in ids]
    return model, loss_fn, decay, no_decay


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    default_model = "manual"
    try:
        import transformers  # noqa: F401
        default_model = "hf"
    except ImportError:
        pass
    ap.add_argument("--model", choices=("manual", "hf"), default=default_model)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the forward+backward (inductor, CPU)")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model, loss_fn, decay, no_decay = build_model(a.model)
    model.train()
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if a.fused else {}))
    step_fn = loss_fn
    if a.compile:
        step_fn = torch.compile(loss_fn)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)
    targets = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)
    n_tok = a.batch * a.seq
    nparams = sum(p.numel() for p in model.parameters())
    print(f"threads:    {torch.get_num_threads()} (of {os.cpu_count()} cores); torch "
          f"{torch.__version__}{', torch.compile' if a.compile else ', eager'}"
          f"{', fused AdamW' if a.fused else ', foreach AdamW'}")
    print(f"model:      GPT-2 124M ({a.model}; {nparams} parameters), f32, AdamW + clip 1.0")
    print(f"shape:      B={a.batch} T={a.seq} ({n_tok} tokens/step)")
    print(f"load avg:   {os.getloadavg()[0]:.2f} (1 min, before the steps)", flush=True)
    times, clean, losses, others_max = [], [], [], 0.0
    cores = os.cpu_count()
    for i in range(a.warmup + a.steps):
        busy0, self0 = machine_busy_s(), time.process_time()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = step_fn(model, idx, targets)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        # other processes' share of all CPUs during the step
        others = max(0.0, ((machine_busy_s() - busy0) - (time.process_time() - self0))
                     / (dt * cores))
        losses.append(lv)
        if i >= a.warmup:
            times.append(dt)
            others_max = max(others_max, others)
            if others <= 0.05:
                clean.append(dt)
        print(f"step {i + 1:3d}{' (warm-up)' if i < a.warmup else ''}: {dt * 1e3:8.1f} ms  "
              f"loss {lv:.4f}  grad_norm {float(gnorm):.3f}  other processes {100 * others:3.0f}%",
              file=sys.stderr)
    med, mean = statistics.median(times), statistics.fmean(times)
    cmed = statistics.median(clean) if clean else float("nan")
    print(f"loss:       {losses[0]:.4f} at step 1, {losses[-1]:.4f} at step {len(losses)} "
          f"(ln V = {math.log(VOCAB):.4f})")
    print(f"load avg:   {os.getloadavg()[0]:.2f} (1 min, after the steps)")
    print(f"steps:      {a.warmup} warm-up, {a.steps} timed; {len(clean)} undisturbed (other "
          f"processes <= 5% of the CPUs; worst step {100 * others_max:.0f}%)")
    print(f"ms/step:    median {med * 1e3:.1f}  mean {mean * 1e3:.1f}  min {min(times) * 1e3:.1f}"
          f"  max {max(times) * 1e3:.1f}; undisturbed median {cmed * 1e3:.1f}")
    print(f"tokens/s:   {n_tok / med:.0f} (median)  {n_tok / mean:.0f} (mean)")
    tag = "pytorch" + ("-compile" if a.compile else "") + ("-fused" if a.fused else "")
    print(f"RESULT {tag} B={a.batch} T={a.seq} median_ms={med * 1e3:.2f} "
          f"mean_ms={mean * 1e3:.2f} tok_s={n_tok / med:.1f} clean_steps={len(clean)} "
          f"clean_median_ms={cmed * 1e3:.2f}")


if __name__ == "__main__":
    main()
