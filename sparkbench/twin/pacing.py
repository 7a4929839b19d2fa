"""Roofline pacing model: how long one engine step takes, from profile fields only.

Notation (all from the hardware and model profiles; README.md has the full derivation):

* ``BW``  = memory_bandwidth_gbps x 1e9 x bandwidth_efficiency x version_efficiency
            x host efficiency (VLLM_SIM_EFFICIENCY) x MoE-backend factor          [bytes/s]
* ``b``   = weight_bits / 8                                                         [bytes/param]
* dense bytes per pass  ``D = (active - unquant - routed_active) x 1e9 x b + unquant x 1e9 x 2``
  (a profile written from the model's files, ``decode_bytes_per_token``: ``D`` = its dense bytes +
  one embedding row + lm_head, and an expert slot = its routed bytes / experts per token)
* routed experts touched by ``t`` tokens in one pass (per MoE layer), for ``E`` experts with
  ``a`` per token:  ``X(t) = E x (1 - (1 - a/E)^t)``; bytes ``X(t) x expert_params x b x moe_layers``.
  Tokens of one sequence inside a speculative verify pass share routing: a sequence verifying
  ``k+1`` tokens counts as ``1 + k x rho`` independent tokens (rho = verify_token_expert_independence).
* recurrent state (GDN / Mamba-2) read + written per sequence per pass: ``2 x S`` bytes.
* KV cache read per sequence: ``context x L_attn x kv_heads x head_dim x 2 x kv_bytes``.

Decode step for ``N`` running sequences, each verifying ``k`` draft tokens (``k = 0`` bare):

``T = (D + experts(N x (1 + k rho)) + N x 2S + KV) / BW + layers x launch``
``  + [k > 0] x (spec_overhead + k x (draft_bytes / BW + draft_layers x launch))``
``  + [W4A4] x act_quant x (layers x (k+1)^p_seq + k x draft_layers) x N^p_batch``
``  + prefill_tokens x 2 x active x 1e9 / prefill_flops``

with ``draft_bytes = (mtp_layer_params + lm_head_params) x 1e9 x b``. A single bare stream
decodes ``1 / T(N=1, k=0)`` tokens per second; with MTP each step yields ``1 + accepted`` tokens.

Graphics clock cap (``VLLM_SIM_CLOCK_CAP_MHZ``, e.g. a GB10 in USB-PD "30 W safety mode"): with
the load clock ``f_load`` (hardware profile ``gpu_telemetry.clock_load_mhz``, 2450 MHz on a GB10),
the running clock ``f = min(cap, f_load)`` and the clock-bound share ``s`` of a decode step
(``engine.clock_bound_share``), every step becomes

``T_capped = T_decode x (1 - s + s x f_load / f) + T_prefill x f_load / f``

where ``T_prefill`` is the prefill FLOP term above (compute, all of it follows the clock) and
``T_decode`` the rest. ``s`` is the share of a decode step whose speed follows the SM clock at a
low clock (the SMs issue the weight loads and the small GEMMs; below ~1 GHz they can no longer
keep LPDDR5x busy), calibrated, not derived: the reference (section 5.3) reports 500-850 MHz
caps costing 60-80 % of the performance. With ``s = 0.85``: 850 MHz -> rate x 0.385 (-61.5 %),
500 MHz -> x 0.232 (-76.8 %), 2400 MHz -> x 0.983 (-1.7 %); a cap at or above ``f_load``
changes nothing. The rate override (``VLLM_SIM_RATE``) is set on the uncapped step, so a capped
host is slower than its uncapped siblings at the same rate knob.

Tensor / pipeline parallel across units (``--tensor-parallel-size t``, ``--pipeline-parallel-size p``,
one GPU per unit, linked by the hardware profile's ``interconnect``: ``link_gbps`` [Gb/s],
``allreduce_latency_us`` [us], ``efficiency`` [fraction of the line rate]):

* link bandwidth ``BW_link = link_gbps x 1e9 / 8 x efficiency``                      [bytes/s]
* one all-reduce of ``x`` tokens (ring, ``t`` ranks): ``AR(x) = latency + x x hidden x 2 B x 2 (t-1)/t / BW_link``
* one stage hand-off of ``x`` tokens: ``H(x) = latency + x x hidden x 2 B / BW_link``
* ``T_unit(N; s, l)`` = the single-unit step above with every byte term (weights, touched
  experts, state, KV, prefill FLOPs) multiplied by the share ``s`` and the launch term by the
  layer share ``l``.

TP (``p = 1``): every unit reads ``1/t`` of the weights per step, and every layer all-reduces
twice (after attention and after the MLP/MoE):

``T = T_unit(N; 1/t, 1) + 2 x layers x AR(tokens)``        (tokens = N (1 + k) + prefill tokens)

PP (``p > 1``, each stage ``layers/p`` layers): the running sequences split into ``m = min(p, N)``
micro-batches that interleave in the pipeline, so each sequence advances once per period

``T = p x [T_unit(N/m; 1/(t p), 1/p) + 2 x (layers/p) x AR(tokens/m) [t > 1]] + (p - 1) x H(tokens/m)``

(a single stream pays every stage in turn: about one unit's step plus the hand-offs; at N streams
the micro-batches of N/p touch fewer experts each, which is where PP gains on batched decode).
The roofline's per-GPU traffic counters divide the step's bytes and FLOPs by ``t x p``.
"""
from __future__ import annotations

from dataclasses import dataclass

KV_DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
                  "fp8_inc": 1, "nvfp4": 0.5625}


def version_key(version: str) -> str:
    """``0.25.0`` -> ``0.25``."""
    return ".".join(version.split(".")[:2])


def lookup_version_efficiency(table: dict, version: str) -> float:
    """Efficiency multiplier for the emulated version: exact minor, else the nearest lower one."""
    key = version_key(version)
    if key in table:
        return float(table[key])
    def as_t(k: str) -> tuple[int, ...]:
        return tuple(int(x) for x in k.split("."))
    lower = [k for k in table if as_t(k) <= as_t(key)]
    if lower:
        return float(table[max(lower, key=as_t)])
    return 1.0


def recurrent_state_bytes(la: dict | None) -> float:
    """Bytes of recurrent state per sequence over all linear-attention layers (one copy).

    GDN: ``v_heads x dk x dv x ssm_bytes + (2 k_heads dk + v_heads dv) x (conv_kernel-1) x 2``.
    Mamba-2: ``heads x head_dim x state x ssm_bytes + (heads head_dim + 2 groups state) x (kernel-1) x 2``.
    """
    if not la:
        return 0.0
    kern = la.get("conv_kernel", 4) - 1
    ssm = la.get("ssm_state_bytes", 4)
    if la.get("type") == "gdn":
        per = (la["num_v_heads"] * la["head_k_dim"] * la["head_v_dim"] * ssm
               + (2 * la["num_k_heads"] * la["head_k_dim"] + la["num_v_heads"] * la["head_v_dim"]) * kern * 2)
    else:
        per = (la["num_heads"] * la["head_dim"] * la["state_size"] * ssm
               + (la["num_heads"] * la["head_dim"] + 2 * la.get("n_groups", 1) * la["state_size"]) * kern * 2)
    return float(per * la["layers"])


def kv_bytes_per_token(model: dict, kv_cache_dtype: str = "auto") -> float:
    """KV-cache bytes one token holds over the model's full-attention layers (K and V) at
    ``--kv-cache-dtype`` (``auto``: the model's 16-bit dtype)."""
    att = model.get("attention") or {}
    kvb = KV_DTYPE_BYTES.get(kv_cache_dtype, 2)
    return float(att.get("full_attention_layers", 0) * att.get("num_kv_heads", 0) * att.get("head_dim", 0) * 2 * kvb)


@dataclass
class PacingModel:
    """Step-time model for one (hardware, model, flags, knobs) combination.

    All times returned are seconds; ``time_scale`` multiplies every step (the rate override).
    """

    hw: dict
    model: dict
    version: str = "0.25.0"
    kv_cache_dtype: str = "auto"
    moe_backend: str = "auto"
    host_efficiency: float = 1.0
    bandwidth_gbps: float | None = None
    spec_k: int = 0
    time_scale: float = 1.0
    clock_cap_mhz: float | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1

    def __post_init__(self) -> None:
        eng = self.hw["engine"]
        self.eng = eng
        bw = self.bandwidth_gbps or float(self.hw["memory_bandwidth_gbps"])
        # a model profile may carry its own fitted efficiency (pacing_calibration, see its _notes)
        base_eff = float((self.model.get("pacing_calibration") or {}).get("bandwidth_efficiency",
                                                                            eng["bandwidth_efficiency"]))
        eff = base_eff * lookup_version_efficiency(eng.get("version_efficiency", {}), self.version)
        eff *= self.host_efficiency
        if self.model.get("moe"):
            eff *= float(eng.get("moe_backend_factor", {}).get(self.moe_backend, 1.0))
        self.bw_bytes_s = bw * 1e9 * eff
        m = self.model
        self.b = float(m["weight_bits"]) / 8.0
        moe = m.get("moe") or None
        routed_active = 0.0
        if moe:
            routed_active = moe["experts_per_token"] * moe["expert_params_m"] * 1e6 * moe["moe_layers"] / 1e9
        unq = float(m.get("unquantized_active_params_b", 0.0))
        if m.get("checkpoint_format") is None:
            unq = float(m["active_params_b"])
        quant_dense = max(float(m["active_params_b"]) - unq - routed_active, 0.0)
        # unquantised weights: bf16 unless the model is served in another dtype (``--dtype float32``)
        ub = float(m.get("unquantized_dtype_bytes", 2.0))
        self.dense_bytes = quant_dense * 1e9 * self.b + unq * 1e9 * ub
        if moe and m.get("checkpoint_format") is None:
            self.dense_bytes = (float(m["active_params_b"]) - routed_active) * 1e9 * ub
        self.expert_bytes_slot = (moe["expert_params_m"] * 1e6 * moe["moe_layers"] * (self.b if m.get("checkpoint_format") else ub)) if moe else 0.0
        files = m.get("decode_bytes_per_token")
        if files:  # a profile written from the model's files: the bytes its headers give, as read
            self.dense_bytes = float(files["dense"] + files["embedding_row"] + files["lm_head"])
            self.expert_bytes_slot = float(files["routed_experts"]) / float(moe["experts_per_token"]) if moe else 0.0
        self.state_bytes = 2.0 * recurrent_state_bytes(m.get("linear_attention"))
        self.kv_bytes_per_token = kv_bytes_per_token(m, self.kv_cache_dtype)
        self.launch_s = float(eng["layer_launch_us"]) * 1e-6
        mtp = m.get("mtp") or {}
        self.draft_bytes = (float(mtp.get("layer_params_b", 0.0)) + float(m.get("lm_head_params_b", 0.0))) * 1e9 * self.b
        self.w4a4 = m.get("activation_quantization") == "dynamic_per_token"
        self.prefill_flops = float(eng.get("prefill_tflops", 20.0)) * 1e12 * self.host_efficiency
        self.load_clock_mhz = float((self.hw.get("gpu_telemetry") or {}).get("clock_load_mhz", 2450.0))
        self.clock_bound_share = float(eng.get("clock_bound_share", 0.85))
        f = min(self.clock_cap_mhz, self.load_clock_mhz) if self.clock_cap_mhz else self.load_clock_mhz
        self.clock_mhz = f
        self.clock_ratio = self.load_clock_mhz / f
        self.decode_clock_factor = 1.0 - self.clock_bound_share + self.clock_bound_share * self.clock_ratio
        self.tp = max(int(self.tensor_parallel_size or 1), 1)
        self.pp = max(int(self.pipeline_parallel_size or 1), 1)
        ic = self.hw.get("interconnect") or {}
        self.link_bytes_s = float(ic.get("link_gbps", 200.0)) * 1e9 / 8.0 * float(ic.get("efficiency", 1.0))
        self.link_latency_s = float(ic.get("allreduce_latency_us", 0.0)) * 1e-6
        self.hidden_size = float(m.get("hidden_size", 0))

    # --- pieces -------------------------------------------------------------------------
    def experts_touched(self, tokens: float) -> float:
        """Expected distinct routed experts per MoE layer for ``tokens`` independent tokens."""
        moe = self.model.get("moe")
        if not moe or tokens <= 0:
            return 0.0
        e, a = float(moe["experts"]), float(moe["experts_per_token"])
        return e * (1.0 - (1.0 - a / e) ** tokens)

    def allreduce_s(self, tokens: float) -> float:
        """One ring all-reduce of ``tokens`` hidden vectors (BF16) over the link, seconds."""
        t = self.tp
        return self.link_latency_s + tokens * self.hidden_size * 2.0 * 2.0 * (t - 1) / t / self.link_bytes_s

    def handoff_s(self, tokens: float) -> float:
        """One pipeline stage hand-off of ``tokens`` hidden vectors (BF16), seconds."""
        return self.link_latency_s + tokens * self.hidden_size * 2.0 / self.link_bytes_s

    def raw_step(self, n_decode: int, k: int = 0, context_tokens: float = 0.0,
                 prefill_tokens: int = 0, n_prefill: int = 0) -> float:
        """Unscaled step time in seconds (see module docstring for the formula).

        ``n_decode`` sequences decode (each verifying ``k`` drafts), ``context_tokens`` is the
        summed context of all sequences in the step, ``prefill_tokens`` prompt tokens are
        prefilled in the same step by ``n_prefill`` sequences. With TP/PP > 1, the cluster's
        step (module docstring, "Tensor / pipeline parallel").
        """
        tp, pp = self.tp, self.pp
        if tp == 1 and pp == 1:
            return self._unit_step(n_decode, k, context_tokens, prefill_tokens, n_prefill)
        layers = float(self.model["layers"])
        if pp == 1:
            tokens = n_decode * (1 + k) + prefill_tokens
            return (self._unit_step(n_decode, k, context_tokens, prefill_tokens, n_prefill, 1.0 / tp)
                    + 2.0 * layers * self.allreduce_s(tokens))
        n_all = n_decode + n_prefill
        if n_all == 0:
            return 0.0
        m = float(min(pp, n_all))
        tokens = (n_decode * (1 + k) + prefill_tokens) / m
        stage = self._unit_step(n_decode / m, k, context_tokens / m, prefill_tokens / m, n_prefill / m,
                                1.0 / (tp * pp), 1.0 / pp)
        if tp > 1:
            stage += 2.0 * layers / pp * self.allreduce_s(tokens)
        return pp * stage + (pp - 1) * self.handoff_s(tokens)

    def _unit_step(self, n_decode: float, k: int = 0, context_tokens: float = 0.0,
                   prefill_tokens: float = 0, n_prefill: float = 0, share: float = 1.0,
                   layer_share: float = 1.0) -> float:
        """One unit's step (seconds): the single-unit formula, byte and FLOP terms x ``share``,
        launch terms x ``layer_share`` (both 1 on one unit)."""
        eng = self.eng
        n_all = n_decode + n_prefill
        if n_all == 0:
            return 0.0
        rho = float(eng.get("verify_token_expert_independence", 0.3))
        eff_tokens = n_decode * (1.0 + k * rho) + prefill_tokens
        nbytes = (self.dense_bytes + self.expert_bytes_slot * self.experts_touched(eff_tokens)
                  + n_all * self.state_bytes + context_tokens * self.kv_bytes_per_token)
        t = share * nbytes / self.bw_bytes_s + layer_share * self.model["layers"] * self.launch_s
        dl = float(eng.get("draft_pass_layers_overhead", 2))
        if k > 0 and n_decode > 0:
            t += float(eng["spec_step_overhead_ms"]) * 1e-3
            t += k * (share * self.draft_bytes / self.bw_bytes_s + dl * self.launch_s)
        if self.w4a4:
            per = float(eng["act_quant_us_per_layer"]) * 1e-6
            seq = (k + 1) ** float(eng["act_quant_seq_exponent"]) if n_decode else 1.0
            units = self.model["layers"] * seq + (k * dl if n_decode else 0)
            t += per * units * max(n_all, 1) ** float(eng["act_quant_batch_exponent"])
        t *= self.decode_clock_factor
        if prefill_tokens:
            t += share * prefill_tokens * 2.0 * float(self.model["active_params_b"]) * 1e9 / self.prefill_flops * self.clock_ratio
        return t

    def step_traffic(self, n_decode: int, k: int = 0, context_tokens: float = 0.0,
                     prefill_tokens: int = 0, n_prefill: int = 0) -> tuple[float, float, float]:
        """(bytes read, bytes written, FLOPs) of one step, as the roofline counts them.

        Read: the bytes of :meth:`raw_step` (weights, touched experts, recurrent state, KV cache
        context) plus the MTP draft passes; written: the new tokens' KV entries and the recurrent
        state; FLOPs: 2 x active parameters per token processed (decode, drafts, prefill).
        """
        n_all = n_decode + n_prefill
        if n_all == 0:
            return 0.0, 0.0, 0.0
        rho = float(self.eng.get("verify_token_expert_independence", 0.3))
        eff_tokens = n_decode * (1.0 + k * rho) + prefill_tokens
        half_state = self.state_bytes / 2.0
        read = (self.dense_bytes + self.expert_bytes_slot * self.experts_touched(eff_tokens)
                + n_all * half_state + context_tokens * self.kv_bytes_per_token)
        if k > 0 and n_decode > 0:
            read += k * self.draft_bytes
        new_tokens = n_decode * (1 + k) + prefill_tokens
        write = n_all * half_state + new_tokens * self.kv_bytes_per_token
        flops = 2.0 * float(self.model["active_params_b"]) * 1e9 * new_tokens
        world = self.tp * self.pp
        return read / world, write / world, flops / world

    def step(self, *args, **kw) -> float:
        """Scaled step time: ``raw_step(...) x time_scale`` (seconds)."""
        return self.raw_step(*args, **kw) * self.time_scale

    def bare_rate(self, context_tokens: float = 0.0) -> float:
        """Predicted single-stream decode tok/s with no speculation (unscaled)."""
        return 1.0 / self.raw_step(1, 0, context_tokens)

    def expected_rate(self, n: int = 1, k: int | None = None, acceptance: list[float] | None = None,
                      context_tokens: float = 0.0) -> float:
        """Predicted per-stream decode tok/s at ``n`` parallel streams (scaled).

        Tokens per step = ``1 + sum(acceptance[:k])`` (unconditional per-position rates).
        """
        k = self.spec_k if k is None else k
        acc = acceptance if acceptance is not None else (self.model.get("mtp") or {}).get("acceptance", [])
        tokens = 1.0 + (sum(acc[:k]) if k else 0.0)
        return tokens / self.step(n, k, context_tokens * n)

    def set_rate_override(self, rate: float) -> None:
        """Scale every step so that a bare single stream decodes ``rate`` tok/s at the uncapped
        clock (a clock cap still slows it by the decode clock factor)."""
        self.time_scale = (1.0 / rate) / (self.raw_step(1, 0, 0.0) / self.decode_clock_factor)
