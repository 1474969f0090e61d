"""SNIP saliency as a zero-cost pre-filter: pick bracket entrants from an oversampled pool.

SNIP (Lee et al., 2019; used as a zero-cost NAS proxy by Abdelfattah et al., 2021) scores a
freshly initialised network by sum |w * dL/dw| on one batch: how much the loss depends on the
weights at initialisation. Candidates with higher saliency enter the bracket first.

What it can and cannot see: saliency depends on the model (depth, width, softcap, windows),
never on optimizer knobs (learning rates, momenta, weight decay), which do not exist before
training. Configs differing only in optimizer knobs tie and keep their sampling order. The arms
report measures whether this helps on the space searched; docs/hyperband.md says what it showed.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

# Threads for scoring: the pre-filter runs in the scheduling process while workers train.
SNIP_THREADS = 1
# Sequences in the scoring batch: enough for a stable gradient, small enough to be ~free.
SNIP_ROWS = 4


class SnipFilter:
    def __init__(self, base_source: str, space, prepare_dir: Path | None = None):
        self.base, self.space = base_source, space
        if prepare_dir is not None and str(prepare_dir) not in sys.path:
            sys.path.insert(0, str(prepare_dir))
        self._batch = None
        self._tok = None
        self.cache: dict[str, float] = {}

    def _data(self, T: int):
        import prepare
        if self._batch is None:
            self._tok = prepare.Tokenizer.from_directory()
            loader = prepare.make_dataloader(self._tok, SNIP_ROWS, T, "train", device="cpu")
            x, y, _ = next(loader)
            self._batch = (x, y)
        return self._batch

    def score(self, config: dict) -> float:
        """SNIP saliency of the candidate's freshly initialised model (higher = more salient)."""
        import torch
        import torch.nn.functional as F
        import prepare
        from search.space import config_id
        key = config_id(config)
        if key in self.cache:
            return self.cache[key]
        mod = types.ModuleType("snip_candidate")
        mod.__file__ = "snip_candidate.py"
        exec(compile(self.space.apply(self.base, config), "snip_candidate.py", "exec"), mod.__dict__)
        threads = torch.get_num_threads()
        torch.set_num_threads(SNIP_THREADS)
        try:
            T = prepare.MAX_SEQ_LEN
            V = self._tok.get_vocab_size() if self._tok else prepare.Tokenizer.from_directory().get_vocab_size()
            torch.manual_seed(0)
            model = mod.build_model(mod.model_config(V, T))
            x, y = self._data(T)
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=-1)
            loss.backward()
            s = sum(float((p.detach() * p.grad).abs().sum()) for p in model.parameters() if p.grad is not None)
        finally:
            torch.set_num_threads(threads)
        self.cache[key] = s
        return s

    def rank(self, configs: list[dict]) -> list[int]:
        """Indices of configs, most salient first (stable: ties keep their order)."""
        scores = [self.score(c) for c in configs]
        return sorted(range(len(configs)), key=lambda i: -scores[i])
