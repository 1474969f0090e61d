"""The screen's proxy split: training text held out from the candidates, measured by the trusted evaluator.

`--screen K` ranks K candidate edits by short runs. The ranking must rest on figures no candidate
can make up, on text no candidate trained on, and never on the validation data. So the tail of the
last training shard (PROXY_FRACTION of its row groups, at least one, or of its rows when it has one
group) is held out: `make_proxy()` writes

- the shard without its tail, which the candidates' sandboxes show at the shard's path, and
- a pinned-like cache in which the tail is the "validation" shard, for the trusted evaluator
  (harness/verify.py with eval_cache=proxy.cache: the same fixed evaluation, another split).

Made once per tag and data (the folder is named by the shard's and tokenizer's hashes).
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from harness import verify as pinned_inputs
from harness.sandbox import DataView

# Fraction of the last training shard's row groups held out as the proxy split.
PROXY_FRACTION = 0.1
# Rows held out when the shard is one row group: at least this many documents.
MIN_PROXY_ROWS = 64


@dataclass
class Proxy:
    cache: Path                                      # AUTORESEARCH_CACHE for the proxy evaluation
    stand_ins: dict = field(default_factory=dict)    # training shard -> the shard without its tail
    docs: int = 0

    def as_dict(self) -> dict:
        return {"cache": str(self.cache), "stand_ins": {str(k): str(v) for k, v in self.stand_ins.items()},
                "docs": self.docs}

    @classmethod
    def from_dict(cls, d: dict | None) -> "Proxy | None":
        if not d:
            return None
        return cls(Path(d["cache"]), {Path(k): Path(v) for k, v in d.get("stand_ins", {}).items()}, d.get("docs", 0))


def make_proxy(data: DataView, root: Path) -> Proxy:
    """The proxy split of `data` under `root` (reused when it exists for the same inputs)."""
    shards = data.training_shards()
    if not shards or data.tokenizer is None or data.pointer is None:
        raise ValueError("no prepared training data to hold a proxy split out of")
    shard = shards[-1]
    key = hashlib.sha256((pinned_inputs.file_sha256(shard) + json.dumps(pinned_inputs.hash_inputs(
        DataView(cache=data.cache, tokenizer=data.tokenizer, pointer=data.pointer)), sort_keys=True)).encode())
    folder = Path(root) / key.hexdigest()[:16]
    done = folder / "proxy.json"
    if done.is_file():
        return Proxy.from_dict(json.loads(done.read_text()))
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cache = tmp / "cache"
    rel_data = data.data.resolve().relative_to(data.cache.resolve())
    (cache / rel_data).mkdir(parents=True)
    pf = pq.ParquetFile(shard)
    table = pf.read()
    rows = table.num_rows
    if pf.num_row_groups > 1:
        keep_groups = pf.num_row_groups - max(1, math.ceil(PROXY_FRACTION * pf.num_row_groups))
        cut = sum(pf.metadata.row_group(i).num_rows for i in range(keep_groups))
    else:
        cut = max(1, rows - max(MIN_PROXY_ROWS, math.ceil(PROXY_FRACTION * rows)))
    if cut >= rows or cut < 1:
        raise ValueError(f"{shard} has {rows} documents: too few to hold a proxy split out of")
    trimmed = tmp / "train" / shard.name
    trimmed.parent.mkdir(parents=True)
    pq.write_table(table.slice(0, cut), trimmed, row_group_size=pf.metadata.row_group(0).num_rows)
    val_name = data.val.name if data.val is not None else "shard_06542.parquet"   # what the evaluation reads
    pq.write_table(table.slice(cut), cache / rel_data / val_name, row_group_size=1024)
    for p in pinned_inputs.input_files(DataView(cache=data.cache, tokenizer=data.tokenizer, pointer=data.pointer)):
        dst = cache / p.resolve().relative_to(data.cache.resolve())
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dst)
    proxy = Proxy(folder / "cache", {shard: folder / "train" / shard.name}, rows - cut)
    (tmp / "proxy.json").write_text(json.dumps(proxy.as_dict()))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return proxy
