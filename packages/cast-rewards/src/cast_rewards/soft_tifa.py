"""The ``soft-tifa`` atom scorer: GenEval 2's Soft-TIFA on a Qwen3-VL judge, one question per
atom, with teacher-forced attention heatmaps of where the judge looked.

**Scores** (GenEval 2's ``evaluation.py``, re-derived): each atom's question (the scene graph
holds it) plus ``" Answer in one word."`` is asked about the image in the judge's chat template;
the soft score is the probability the judge puts on the *first token* of an accepted answer at
the answer position — "Yes", "yes", " yes", " Yes" for yes/no atoms; for a count atom the number
word, capitalised, with a leading space, and the digit (GenEval 2's six variants). GenEval 2 reads
``generate(max_new_tokens=1, output_scores=True).scores[0]``; under greedy decoding with no
penalties that is the last-position logit of one forward pass, which is what we compute (tested
equal). Two deliberate differences, both options: variants whose first tokens coincide are counted
once (GenEval 2 would add the same probability twice — on Qwen's tokenizer the variants are
distinct tokens, so nothing changes there), and ``renormalize=True`` divides a yes/no atom's
mass by yes + no mass (GenEval 2 does not).

**Batching**: with ``prefix_reuse`` (the default) each image's prefix (``<|im_start|>user`` and
its image tokens) runs once into a KV cache, and its questions run ``batch_size`` at a time against
copies of it, right-padded and read at their own last token; without it, every (image, atom)
question of a call goes through the model as a whole sequence, ``batch_size`` at a time, left-padded
so the answer position is the last column. Neither changes a score (tested).

**Heatmaps** (when asked): the attention from the answer-predicting position (the last prompt
token) to the image tokens, in the decoder layers of ``heatmap_layers`` (a band given as
fractions of the depth, default the middle-to-late 0.5–0.85, after ViCrop's layer 22 of 28). We
never switch the model to eager attention or ask for ``output_attentions``: forward hooks on the
band's attention modules recompute that one query row exactly as eager attention would (tested
against eager) and keep ``[heads, L]`` per layer. Then: mean over heads and layers; only image
tokens kept (the text sinks, e.g. the first token, are gone with them) and renormalised;
image-token sinks — cells above ``sink_factor`` × the map's median — set to the median; optionally
divided by the same map for a generic question (``baseline_question``, ViCrop's ``rel_att``:
cancels where the judge always looks); laid out row-major on the merged vision grid (image
height/32 × width/32 for the real model); and — until the engine accepts heatmaps on the
judge's own grid — resized bilinearly to the image size inside the scorer and scaled to peak 1.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch

from cast_core.scene_graph import Atom, SceneGraph
from cast_core.types import AtomScores
from cast_rewards.images import to_pil
from cast_rewards.lexicon import COUNT_WORDS
from cast_rewards.model_dirs import ModelPathError, check_device, check_model_dir

__all__ = ["SoftTifaScorer", "accepted_answers", "question_for"]

YES = ("Yes", "yes", " yes", " Yes")
NO = ("No", "no", " no", " No")
NUMBER_WORDS = {n: w for w, n in COUNT_WORDS.items() if w not in ("a", "an")} | {0: "zero"}  # 3 -> "three"
SUFFIX = " Answer in one word."
GENERIC_QUESTION = "Write a general description of the image."
#: what scorer_kwargs.path must name, said in the errors
JUDGE_DIR = (
    "a Qwen3-VL model directory as save_pretrained writes it (config.json, model*.safetensors, the tokenizer "
    "and preprocessor_config.json), e.g. a download of Qwen/Qwen3-VL-8B-Instruct"
)


def question_for(atom: Atom) -> str:
    return f"{atom.question}{SUFFIX}"


def accepted_answers(atom: Atom) -> tuple[str, ...]:
    """GenEval 2's accepted answers: the yes-variants, or for a count the number's six forms."""
    if atom.kind != "count":
        return YES
    n = int(atom.value)
    word = NUMBER_WORDS.get(n, str(n))
    return (word, word.capitalize(), " " + word, " " + word.capitalize(), str(n), " " + str(n))


class SoftTifaScorer:
    """Soft-TIFA with a Qwen3-VL judge. Give ``path`` (a local directory or a hub id, default
    ``Qwen/Qwen3-VL-8B-Instruct``) or an already built ``model`` and ``processor``."""

    def __init__(
        self,
        path: str | None = "Qwen/Qwen3-VL-8B-Instruct",
        *,
        model: Any = None,
        processor: Any = None,
        device: str | None = None,
        torch_dtype: Any = None,
        batch_size: int = 16,
        max_pixels: int | None = 512 * 512,
        renormalize: bool = False,
        heatmap_layers: Sequence[float] = (0.5, 0.85),
        sink_factor: float = 20.0,
        baseline_question: str | None = GENERIC_QUESTION,
        prefix_reuse: bool = True,
    ):
        if (model is None) != (processor is None):
            raise ValueError("SoftTifaScorer: give both model= and processor=, or neither (then path= is loaded)")
        self.device = check_device(device, "scorer_kwargs.device")  # before the weights are read
        if model is None:
            model, processor = self._load(path, torch_dtype)
        self.model = model.to(self.device).eval()
        self.model.requires_grad_(False)
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.tokenizer.padding_side = "left"  # the answer position is then the last column of every row
        if max_pixels is not None:
            _limit_pixels(processor.image_processor, int(max_pixels))
        self.batch_size = int(batch_size)
        self.prefix_reuse = bool(prefix_reuse)
        self.renormalize = bool(renormalize)
        lo, hi = (float(f) for f in heatmap_layers)
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"heatmap_layers must be fractions 0 <= lo <= hi <= 1 of the depth, got {heatmap_layers}")
        depth = len(self._layers())
        self.band = sorted({min(depth - 1, int(round(f * (depth - 1)))) for f in (lo, hi)})
        self.band = list(range(self.band[0], self.band[-1] + 1))
        self.sink_factor = float(sink_factor)
        self.baseline_question = baseline_question
        self.image_token_id = int(model.config.image_token_id)
        self.merge = int(model.config.vision_config.spatial_merge_size)
        self._first_token: dict[str, int] = {}

    @staticmethod
    def _load(path: str | None, torch_dtype: Any):
        from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

        path = check_model_dir(
            path, owner="soft-tifa", key="scorer_kwargs.path", wants=JUDGE_DIR, thing="a Qwen3-VL judge"
        )
        dtype = torch_dtype or (torch.bfloat16 if torch.cuda.is_available() else torch.float32)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        try:
            model = Qwen3VLForConditionalGeneration.from_pretrained(path, dtype=dtype)
            processor = AutoProcessor.from_pretrained(path)
        except (OSError, ValueError) as err:  # a hub id without network, a directory missing a file
            first = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
            raise ModelPathError(
                f"soft-tifa: cannot load a Qwen3-VL judge from {path!r} ({first}); give scorer_kwargs.path = "
                f"{JUDGE_DIR} (or a hub id on a machine with network)"
            ) from None
        return model, processor

    # -- the questions ----------------------------------------------------------------------------
    def _token(self, text: str) -> int:
        if text not in self._first_token:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if not ids:
                raise ValueError(f"soft-tifa: the tokenizer gives no token for answer {text!r}")
            self._first_token[text] = ids[0]
        return self._first_token[text]

    def _ids(self, answers: Sequence[str]) -> list[int]:
        return list(dict.fromkeys(self._token(a) for a in answers))

    def _messages(self, image: Any, question: str) -> list[dict]:
        return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": question}]}]

    def _encode(self, images: Sequence[Any], questions: Sequence[str]) -> dict:
        texts = [self._chat(img, q) for img, q in zip(images, questions)]
        enc = self.processor(text=texts, images=list(images), padding=True, return_tensors="pt")
        return {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in enc.items()}

    # -- the forward pass ---------------------------------------------------------------------------
    def _layers(self):
        return self.model.model.language_model.layers

    @torch.no_grad()
    def _run(self, images: Sequence[Any], questions: Sequence[str], maps: bool):
        """One row per (image, question): last-position probabilities ``[n, V]`` (float32) and, if
        ``maps``, each row's attention to its image tokens with the merged grid it lies on. Every
        image's sequence is encoded whole, left-padded so the answer position is the last column."""
        enc = self._encode(images, questions)
        n = enc["input_ids"].shape[0]
        rows: dict[int, torch.Tensor] = {}
        last = torch.full((n,), enc["input_ids"].shape[1] - 1, device=self.device)
        with self._capture(enc["attention_mask"], last, rows) if maps else contextlib.nullcontext():
            out = self.model(**enc, logits_to_keep=1)
        probs = out.logits[:, -1].float().softmax(-1)
        if not maps:
            return probs, None
        attn = torch.stack([rows[i] for i in self.band]).mean(0)  # [n, L]: mean over layers (heads already)
        image_rows = [
            (attn[r][enc["input_ids"][r] == self.image_token_id], self._grid(enc["image_grid_thw"][r]))
            for r in range(n)
        ]
        return probs, image_rows

    def _chat(self, image: Any, question: str) -> str:
        return self.processor.apply_chat_template(
            self._messages(image, question), add_generation_prompt=True, tokenize=False
        )

    @torch.no_grad()
    def _prefix(self, image: Any) -> dict:
        """One image's shared prefix (``<|im_start|>user`` + its image tokens) run once: its KV
        cache (logits only at the last position: the prefix's own are never read), its tokens and
        the multimodal RoPE offset the text after it continues from."""
        text = self._chat(image, "")
        marker = "<|vision_end|>"
        cut = text.index(marker) + len(marker)
        enc = self.processor(text=[text[:cut]], images=[image], return_tensors="pt").to(self.device)
        out = self.model(**enc, use_cache=True, logits_to_keep=1)
        cache = out["cache"] if "cache" in out else out.past_key_values  # transformers 5 / 4.x
        return {"enc": enc, "cache": cache, "delta": self.model.model.rope_deltas, "cut": cut}

    @torch.no_grad()
    def _run_prefixed(self, image: Any, prefix: dict, questions: Sequence[str], maps: bool):
        """Rows for one image's questions against its :meth:`_prefix`: each question's suffix runs
        against a copy of the cache, right-padded, read at its own last token; the text positions
        continue the prefix's multimodal RoPE, as generation does."""
        import copy

        suffixes = [self._chat(image, q)[prefix["cut"] :] for q in questions]
        self.tokenizer.padding_side = "right"
        try:
            suffix = self.tokenizer(suffixes, return_tensors="pt", padding=True, add_special_tokens=False).to(
                self.device
            )
        finally:
            self.tokenizer.padding_side = "left"
        enc = prefix["enc"]
        k, plen, slen = len(questions), enc["input_ids"].shape[1], suffix["input_ids"].shape[1]
        cache = copy.deepcopy(prefix["cache"])  # the suffix pass appends to it; the prefix serves the next chunk
        cache.batch_repeat_interleave(k)
        mask = torch.cat([enc["attention_mask"].expand(k, -1), suffix["attention_mask"]], 1)
        positions = (torch.arange(plen, plen + slen, device=self.device) + prefix["delta"].reshape(-1)[0]).view(
            1, 1, slen
        )
        last = suffix["attention_mask"].sum(1) - 1
        rows: dict[int, torch.Tensor] = {}
        with self._capture(mask, last, rows) if maps else contextlib.nullcontext():
            result = self.model(
                input_ids=suffix["input_ids"],
                attention_mask=mask,
                position_ids=positions.expand(3, k, slen),
                **{_cache_argument(self.model): cache},
                use_cache=True,
            )
        probs = result.logits[torch.arange(k, device=self.device), last].float().softmax(-1)
        if not maps:
            return probs, None
        attn = torch.stack([rows[i] for i in self.band]).mean(0)  # [k, plen + slen]
        where = enc["input_ids"][0] == self.image_token_id
        grid = self._grid(enc["image_grid_thw"][0])
        return probs, [(attn[r, :plen][where], grid) for r in range(k)]

    def _grid(self, thw: torch.Tensor) -> tuple[int, int]:
        _, gh, gw = (int(v) for v in thw)
        return gh // self.merge, gw // self.merge

    @contextlib.contextmanager
    def _capture(self, key_mask: torch.Tensor, query: torch.Tensor, rows: dict[int, torch.Tensor]) -> Iterator[None]:
        """Hooks on the band's attention modules that recompute the attention weights of one
        query row per sequence (``query[b]``, an index into this pass's tokens) over every key —
        the cached prefix's too — with eager attention's arithmetic, averaged over heads.
        ``key_mask`` ``[B, keys]`` marks real keys (padding is masked; the query is each row's
        last real token, so no real key lies after it)."""
        from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb, repeat_kv

        handles = []
        batch = torch.arange(len(query), device=query.device)

        def hook(index):
            def capture(module, args, kwargs, output):
                hidden = kwargs.get("hidden_states", args[0] if args else None)
                cos, sin = kwargs.get("position_embeddings", args[1] if len(args) > 1 else None)
                n = hidden.shape[0]
                q = module.q_norm(module.q_proj(hidden[batch, query][:, None]).view(n, 1, -1, module.head_dim))
                q, _ = apply_rotary_pos_emb(
                    q.transpose(1, 2), q.transpose(1, 2), cos[batch, query][:, None], sin[batch, query][:, None]
                )
                cache = kwargs.get("cache", kwargs.get("past_key_values"))
                if cache is not None:  # the keys the layer attended to: cached prefix + this pass
                    k = _cached_keys(cache, module.layer_idx)
                else:
                    k = module.k_norm(module.k_proj(hidden).view(*hidden.shape[:-1], -1, module.head_dim))
                    _, k = apply_rotary_pos_emb(k.transpose(1, 2), k.transpose(1, 2), cos, sin)
                k = repeat_kv(k, module.num_key_value_groups)
                scores = torch.matmul(q, k.transpose(2, 3)).float() * module.scaling  # [B, H, 1, keys]
                scores = scores.masked_fill(~key_mask[:, None, None, :].bool(), float("-inf"))
                rows[index] = scores.softmax(-1)[:, :, 0].mean(1)  # [B, keys]

            return capture

        for i in self.band:
            handles.append(self._layers()[i].self_attn.register_forward_hook(hook(i), with_kwargs=True))
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    # -- maps ----------------------------------------------------------------------------------------
    def _map(self, row: torch.Tensor, grid: tuple[int, int], baseline: torch.Tensor | None) -> torch.Tensor:
        m = row.float().clamp_min(0)
        m = m / m.sum().clamp_min(1e-12)
        med = m.median()
        if self.sink_factor > 0 and float(med) > 0:
            m = torch.where(m > self.sink_factor * med, med, m)
        if baseline is not None:
            m = m / (baseline + 1e-6 * baseline.mean())
        m = m.reshape(grid)
        return m / m.max().clamp_min(1e-12)

    def _baseline(self, row: torch.Tensor) -> torch.Tensor:
        b = row.float().clamp_min(0)
        return b / b.sum().clamp_min(1e-12)

    # -- AtomScorer ------------------------------------------------------------------------------------
    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        graphs = list(graphs)
        if len(graphs) != len(images):
            raise ValueError(f"soft-tifa: {len(images)} images for {len(graphs)} scene graphs")
        pil = [to_pil(img) for img in images]
        jobs = [(i, k, question_for(atom)) for i, g in enumerate(graphs) for k, atom in enumerate(g.atoms)]
        if heatmaps and self.baseline_question:  # asked with the atoms, so each image's prefix runs once
            jobs += [(i, -1, self.baseline_question) for i in range(len(pil))]
        results = self._ask(pil, jobs, heatmaps)
        scores = [
            torch.tensor([self._soft_score(results[(i, k)][0], atom) for k, atom in enumerate(g.atoms)])
            for i, g in enumerate(graphs)
        ]
        maps = None
        if heatmaps:
            baselines: list = [None] * len(pil)
            if self.baseline_question:
                baselines = [self._baseline(results[(i, -1)][1][0]) for i in range(len(pil))]
            maps = []
            for i, g in enumerate(graphs):
                per_atom = [self._map(*results[(i, k)][1], baselines[i]) for k in range(len(g.atoms))]
                grid = torch.stack(per_atom) if per_atom else torch.zeros(0, 1, 1)
                maps.append(_resize(grid, tuple(int(v) for v in images[i].shape[-2:])))
        return AtomScores(graphs=graphs, scores=[s.float() for s in scores], heatmaps=maps)

    def _ask(self, pil: list, jobs: list[tuple[int, int, str]], maps: bool) -> dict:
        """``{(image, key): (probs [V], (image-token row, grid) or None)}`` for ``jobs`` of
        ``(image index, key, question)``: per image with its prefix encoded once
        (``prefix_reuse``), or all questions of all images batched as whole sequences."""
        out: dict = {}
        if self.prefix_reuse:
            for i in dict.fromkeys(j[0] for j in jobs):
                mine = [j for j in jobs if j[0] == i]
                prefix = self._prefix(pil[i])  # once per image, for all its questions
                for start in range(0, len(mine), self.batch_size):
                    chunk = mine[start : start + self.batch_size]
                    probs, rows = self._run_prefixed(pil[i], prefix, [q for _, _, q in chunk], maps)
                    for r, (_, key, _) in enumerate(chunk):
                        out[(i, key)] = (probs[r], rows[r] if maps else None)
            return out
        for start in range(0, len(jobs), self.batch_size):
            chunk = jobs[start : start + self.batch_size]
            probs, rows = self._run([pil[i] for i, _, _ in chunk], [q for _, _, q in chunk], maps)
            for r, (i, key, _) in enumerate(chunk):
                out[(i, key)] = (probs[r], rows[r] if maps else None)
        return out

    def _soft_score(self, probs: torch.Tensor, atom: Atom) -> float:
        mass = float(probs[self._ids(accepted_answers(atom))].sum())
        if self.renormalize and atom.kind != "count":
            no = float(probs[self._ids(NO)].sum())
            mass = mass / max(mass + no, 1e-12)
        return min(max(mass, 0.0), 1.0)


def _limit_pixels(image_processor: Any, max_pixels: int) -> None:
    """Fix the judge's image-token count: resize so that H·W ≤ ``max_pixels`` (512² → 256
    tokens on Qwen3-VL). transformers 5 keeps the limit as ``size.longest_edge`` (a SizeDict, in
    pixels), 4.x as ``max_pixels`` and ``size["longest_edge"]``."""
    size = getattr(image_processor, "size", None)
    if isinstance(size, dict):
        size["longest_edge"] = max_pixels
    elif size is not None and hasattr(size, "longest_edge"):
        size.longest_edge = max_pixels
    if "max_pixels" in vars(image_processor):
        image_processor.max_pixels = max_pixels


def _resize(maps: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    if maps.numel() == 0:
        return maps.new_zeros(0, *size)
    out = torch.nn.functional.interpolate(maps[None].float(), size=size, mode="bilinear", align_corners=False)[0]
    out = out.clamp_min(0)
    return out / out.flatten(1).amax(1).clamp_min(1e-12)[:, None, None]  # peak 1 again after interpolation


def _cache_argument(model: Any) -> str:
    """transformers 5 names the KV cache argument ``cache``; 4.x ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cached_keys(cache: Any, layer: int) -> torch.Tensor:
    if hasattr(cache, "layers"):
        return cache.layers[layer].keys
    return cache.key_cache[layer]  # transformers 4.x DynamicCache
