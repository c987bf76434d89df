#!/usr/bin/env python3
"""PyTorch peer of bench/train_bench.c on a GPU: one training step of the same
model (forward, backward, clip_grad_norm_(1.0), AdamW) timed the same way, so
bench/cuda_bench.sh can put both in one table from one device call.

Models are transformers' own (GPT2LMHeadModel, LlamaForCausalLM) with
attn_implementation="sdpa" (flash attention through
F.scaled_dot_product_attention), built from configs equal to Trainyard's
presets (gpt2-124m, gpt2-350m: vocab 50257, tied; llama-1b: Llama-3.2-1B's
shape, vocab 128256, GQA 32/8, tied), dropout 0. Precision: bf16 autocast
over f32 parameters (--dtype bf16-mixed, Trainyard's same-named mode), bf16
parameters and compute (--dtype bf16, as Trainyard's --dtype bf16) or f32
(TF32 off). AdamW(fused=True), lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight
decay 0.1 on matrices only; or --optimizer adafactor (transformers.Adafactor,
factored, no momentum). --checkpointing turns on transformers' gradient
checkpointing (each decoder layer recomputed in the backward). --compile wraps the model and the
loss in one torch.compile (inductor; the warm-up steps pay for compiling;
--cd-tuning adds inductor's coordinate-descent tuning, as llm.c's
train_gpt2.py does). Random token ids, fixed for
the run. Timing: CUDA-synchronized wall time per step (the loss is read back
each step, as Trainyard's trainer does); median over the timed steps. Peak
memory: torch.cuda.max_memory_allocated over the timed steps.

--impl minimal swaps transformers' GPT2LMHeadModel for a compact GPT-2 of
the same shape and math written below (one fused qkv projection, SDPA with
is_causal, tanh GELU, tied head, no attention-mask or cache plumbing), the
kind of model nanoGPT and llm.c's PyTorch reference train: torch.compile
makes it faster than transformers' module, so it is the stronger peer.

--vocab-pad N rounds the model's vocabulary up to a multiple of N (nanoGPT's
50304 for GPT-2 with N = 64): the embedding and head get unused rows, the
tokens still come from the real vocabulary, and the loss runs over the
padded logits as nanoGPT's does. It is what speed-minded PyTorch users do,
since matrix shapes that are multiples of 64 run faster; Trainyard pads its
LM head internally and keeps the model's vocabulary.

Prints the figures and one "RESULT pytorch..." line.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

PRESETS = {
    "gpt2-124m": dict(arch="gpt2", vocab=50257, layers=12, hidden=768, heads=12, kv=12,
                      ffn=3072, positions=1024),
    "gpt2-350m": dict(arch="gpt2", vocab=50257, layers=24, hidden=1024, heads=16, kv=16,
                      ffn=4096, positions=1024),
    "llama-1b": dict(arch="llama", vocab=128256, layers=16, hidden=2048, heads=32, kv=8,
                     ffn=8192, positions=131072),
    "llama-7b": dict(arch="llama", vocab=32000, layers=32, hidden=4096, heads=32, kv=32,
                     ffn=11008, positions=4096),
}


class MinimalGPT2(torch.nn.Module):
    """GPT-2 (pre-LN, learned positions, tied head) in the fewest modules."""

    def __init__(self, p):
        super().__init__()
        nn = torch.nn
        C, L = p["hidden"], p["layers"]
        self.heads = p["heads"]
        self.wte = nn.Embedding(p["vocab"], C)
        self.wpe = nn.Embedding(p["positions"], C)
        self.ln1 = nn.ModuleList(nn.LayerNorm(C) for _ in range(L))
        self.qkv = nn.ModuleList(nn.Linear(C, 3 * C) for _ in range(L))
        self.proj = nn.ModuleList(nn.Linear(C, C) for _ in range(L))
        self.ln2 = nn.ModuleList(nn.LayerNorm(C) for _ in range(L))
        self.fc = nn.ModuleList(nn.Linear(C, p["ffn"]) for _ in range(L))
        self.fc_out = nn.ModuleList(nn.Linear(p["ffn"], C) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                torch.nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                torch.nn.init.zeros_(m.bias)

    def forward(self, input_ids):
        B, T = input_ids.shape
        pos = torch.arange(T, device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        H = self.heads
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](self.ln1[i](x)).split(x.shape[-1], dim=2)
            q, k, v = (t.view(B, T, H, -1).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj[i](y.transpose(1, 2).reshape(B, T, -1))
            x = x + self.fc_out[i](F.gelu(self.fc[i](self.ln2[i](x)), approximate="tanh"))
        return torch.nn.functional.linear(self.ln_f(x), self.wte.weight)


def build(name, attn, impl="transformers", vocab_pad=0):
    p = dict(PRESETS[name])
    if vocab_pad > 0:
        p["vocab"] = -(-p["vocab"] // vocab_pad) * vocab_pad
    if impl == "minimal":
        if p["arch"] != "gpt2":
            raise SystemExit("--impl minimal is a GPT-2; use --impl transformers for " + name)
        return MinimalGPT2(p), p
    if p["arch"] == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=p["layers"], n_head=p["heads"], n_embd=p["hidden"],
                         n_inner=p["ffn"], n_positions=p["positions"], vocab_size=p["vocab"],
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         activation_function="gelu_new")
        cfg._attn_implementation = attn
        model = GPT2LMHeadModel(cfg)
    else:
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
        theta = 500000.0 if name == "llama-1b" else 10000.0
        rope = {"rope_type": "default", "rope_theta": theta}
        if name == "llama-1b":
            rope.update({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
        common = dict(vocab_size=p["vocab"], hidden_size=p["hidden"],
                      intermediate_size=p["ffn"], num_hidden_layers=p["layers"],
                      num_attention_heads=p["heads"], num_key_value_heads=p["kv"],
                      max_position_embeddings=p["positions"],
                      tie_word_embeddings=name == "llama-1b",
                      rms_norm_eps=1e-5 if name == "llama-1b" else 1e-6, attention_dropout=0.0)
        if int(transformers.__version__.split(".")[0]) >= 5:
            cfg = LlamaConfig(rope_parameters=rope, **common)
        else:  # the legacy form
            legacy = dict(rope)
            legacy.pop("rope_theta")
            cfg = LlamaConfig(rope_theta=theta, rope_scaling=None if name != "llama-1b" else legacy,
                              **common)
        cfg._attn_implementation = attn
        model = LlamaForCausalLM(cfg)
    return model, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dtype", default="bf16-mixed", choices=("bf16-mixed", "bf16", "f32"),
                    help="bf16: bf16 parameters and compute (no autocast), as Trainyard's "
                         "--dtype bf16")
    ap.add_argument("--optimizer", default="adamw", choices=("adamw", "adafactor"),
                    help="adafactor: transformers.Adafactor (factored, no momentum, "
                         "relative_step off, scale_parameter on, lr 1e-3), as Trainyard's "
                         "--optimizer adafactor")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--cd-tuning", action="store_true",
                    help="inductor's coordinate_descent_tuning (llm.c's train_gpt2.py sets it); "
                         "longer compile")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--impl", default="transformers", choices=("transformers", "minimal"))
    ap.add_argument("--checkpointing", action="store_true",
                    help="gradient checkpointing (transformers' own)")
    ap.add_argument("--vocab-pad", type=int, default=0, metavar="N",
                    help="round the vocabulary up to a multiple of N (nanoGPT: 64, 50257 -> "
                         "50304); tokens still come from the real vocabulary")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timed steps, N more under torch.profiler: the kernels' "
                         "CUDA time per step, largest first (to set beside TRAINYARD_PROFILE=1)")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    if a.vocab_pad < 0:
        raise SystemExit("--vocab-pad must be 0 (off) or a positive multiple")
    model, p = build(a.model, "sdpa", a.impl, a.vocab_pad)
    if a.dtype == "bf16":
        model.to(torch.bfloat16)
    model.to(dev).train()
    if a.checkpointing:
        if a.impl == "minimal":
            raise SystemExit("--checkpointing is transformers' own: use --impl transformers")
        model.gradient_checkpointing_enable()
    decay = [q for n, q in model.named_parameters() if q.dim() == 2 and "wte" not in n
             and "wpe" not in n and "embed_tokens" not in n]
    ids = {id(q) for q in decay}
    no_decay = [q for q in model.parameters() if id(q) not in ids]
    if a.optimizer == "adafactor":
        from transformers.optimization import Adafactor
        opt = Adafactor(model.parameters(), lr=1e-3, relative_step=False, scale_parameter=True,
                        warmup_init=False)
    else:
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    V = p["vocab"]

    def loss_of(idx, targets):
        logits = model(input_ids=idx)
        logits = logits if a.impl == "minimal" else logits.logits
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    if a.compile and a.cd_tuning:
        import torch._inductor.config as inductor_config
        inductor_config.coordinate_descent_tuning = True
    # compiled with the loss inside, as llm.c's train_gpt2.py and nanoGPT do:
    # inductor then fuses the head's output with the cross-entropy instead of
    # materializing f32 logits between two graphs
    fwd_loss = torch.compile(loss_of) if a.compile else loss_of
    g = torch.Generator(device=dev).manual_seed(1)
    V_data = PRESETS[a.model]["vocab"]  # padded rows are never a token
    idx = torch.randint(0, V_data, (a.batch, a.seq), generator=g, device=dev)
    targets = torch.randint(0, V_data, (a.batch, a.seq), generator=g, device=dev)
    n_tok = a.batch * a.seq
    nparams = sum(q.numel() for q in model.parameters())
    autocast = a.dtype == "bf16-mixed"
    tag = "pytorch-" + ("compile" if a.compile else "eager") + \
        ("-minimal" if a.impl == "minimal" else "") + ("-cd" if a.cd_tuning else "") + \
        (f"-pad{a.vocab_pad}" if a.vocab_pad else "")
    print(f"device:     {torch.cuda.get_device_name()}; torch {torch.__version__}; {tag}, "
          f"{a.dtype}, {'Adafactor' if a.optimizer == 'adafactor' else 'fused AdamW'}, SDPA, "
          f"{a.impl} model{', gradient checkpointing' if a.checkpointing else ''}")
    print(f"model:      {a.model} ({nparams} parameters, vocabulary {V}) B={a.batch} "
          f"T={a.seq}", flush=True)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = fwd_loss(idx, targets)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item(), float(gnorm)

    times, losses = [], []
    t_start = time.perf_counter()
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        lv, gn = step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(lv)
        if i >= a.warmup:
            times.append(dt)
        print(f"step {i + 1:3d}{' (warm-up)' if i < a.warmup else ''}: {dt * 1e3:8.1f} ms  "
              f"loss {lv:.4f}  grad_norm {gn:.3f}", file=sys.stderr)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**20
    flops_token = 6.0 * nparams + 6.0 * p["layers"] * a.seq * p["hidden"]
    tflops = flops_token * n_tok / med * 1e-12
    mfu = f", MFU {100 * tflops / a.peak_tflops:.1f}%" if a.peak_tflops else ""
    print(f"loss:       {losses[0]:.4f} -> {losses[-1]:.4f}; warm-up + steps took "
          f"{time.perf_counter() - t_start:.1f} s")
    print(f"ms/step:    median {med * 1e3:.2f}  min {min(times) * 1e3:.2f}  max "
          f"{max(times) * 1e3:.2f}")
    print(f"tokens/s:   {n_tok / med:.0f}; {tflops:.1f} TFLOP/s{mfu}; peak memory {peak:.0f} MiB")
    print(f"RESULT {tag} model={a.model} dtype={a.dtype} optimizer={a.optimizer} "
          f"checkpointing={int(a.checkpointing)} B={a.batch} T={a.seq} "
          f"median_ms={med * 1e3:.2f} tok_s={n_tok / med:.1f} tflops={tflops:.1f} "
          f"peak_mib={peak:.0f}")
    if a.profile > 0:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.profile):
                step()
            torch.cuda.synchronize()
        rows = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        rows.sort(key=lambda e: e.self_device_time_total, reverse=True)
        total = sum(e.self_device_time_total for e in rows) / a.profile / 1e3
        print(f"profile:    {total:.2f} ms of kernels per step over {a.profile} steps")
        for e in rows[:30]:
            print(f"  {e.self_device_time_total / a.profile / 1e3:8.3f} ms  "
                  f"{e.count // a.profile:5d}x  {e.key[:110]}")


if __name__ == "__main__":
    main()
