"""Inference: KV-cached decoding reproduces train.py's GPT exactly; loading kept commits; the CLIs."""
import io

import pytest
import torch

import train
from inference import generate as gen
from inference.kvcache import KVCache, forward_cached, kv_bytes_per_token
from inference.runs import find_kept, load_kept, run_tokenizer
from tests.infer_fixture import make_run, one_thread, random_model, tiny_config

_one_thread = pytest.fixture(autouse=True)(one_thread)

ATOL = 2e-4  # float32 logits (softcap 15) through a different attention order of summation


def assert_close(a, b):
    """Same shape, max abs difference under ATOL (torch.testing imports for seconds here)."""
    assert a.shape == b.shape
    assert float((a - b).abs().max()) < ATOL


@pytest.mark.parametrize("cfg", [tiny_config(), tiny_config(n_kv_head=4, pattern="SSL", frac=0.1),
                                 tiny_config(n_layer=3, pattern="L")])
def test_cached_decoding_matches_full_forward(cfg):
    model = random_model(cfg)
    idx = torch.randint(0, cfg["vocab_size"], (2, cfg["sequence_len"]), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
    cache = KVCache(model)
    parts = [forward_cached(model, idx[:, :11], cache, train)]  # a prefill, then one token at a time
    parts += [forward_cached(model, idx[:, t:t + 1], cache, train) for t in range(11, 40)]
    parts.append(forward_cached(model, idx[:, 40:], cache, train))  # and a chunk that crosses windows
    cached = torch.cat(parts, dim=1)
    assert cached.shape == full.shape
    assert_close(cached, full)
    assert full.std() > 0.5  # random weights: the logits carry signal, not a constant


def test_window_layers_keep_only_their_window():
    cfg = tiny_config(pattern="SL", frac=0.25)
    model = random_model(cfg)
    cache = KVCache(model)
    forward_cached(model, torch.zeros(1, 50, dtype=torch.long), cache, train)
    w = model.windows[0]
    assert w == 16 and model.windows[1] == -1
    assert [k.size(2) for k in cache.k] == [16, 50, 16, 50]
    assert cache.kpos[0].tolist() == list(range(34, 50))
    per_token = kv_bytes_per_token(cfg, context=50)
    assert cache.nbytes() == pytest.approx(per_token * 50)


def test_rollback_with_slack_is_exact():
    cfg = tiny_config()
    model = random_model(cfg)
    idx = torch.randint(0, cfg["vocab_size"], (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(idx)
    cache = KVCache(model, slack=8)
    forward_cached(model, idx[:, :30], cache, train)
    forward_cached(model, torch.full((1, 6), 7), cache, train)  # six wrong guesses...
    cache.truncate(30)  # ...rolled back
    again = forward_cached(model, idx[:, 30:], cache, train)
    assert_close(again, full[:, 30:])


def test_greedy_generation_equals_argmax_of_full_forward():
    cfg = tiny_config()
    model = random_model(cfg)
    prompt = torch.tensor([[1, 2, 3, 4, 5]])
    out = gen.generate(model, train, prompt, 30, temperature=0.0)
    seq = prompt
    with torch.no_grad():
        for _ in range(30):
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert out.tolist() == seq[:, 5:].tolist()


def test_generation_past_the_context_reprefills():
    cfg = tiny_config(seq_len=32)
    model = random_model(cfg)
    out = gen.generate(model, train, torch.tensor([[1, 2, 3]]), 70, temperature=1.0, top_k=5,
                       generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 70)
    assert int(out.max()) < cfg["vocab_size"]


def test_top_k_sampling_stays_in_the_top_k():
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0, 3.0]])
    picks = {int(gen.sample_next(logits, 1.0, 2, torch.Generator().manual_seed(s))) for s in range(40)}
    assert picks == {1, 2}


def test_load_kept_commit_from_journal(tmp_path):
    run, commits = make_run(tmp_path)
    assert find_kept(run).commit == commits[0]  # lowest trusted_bpb
    model, kept, mod = load_kept(run, commits[1][:8])
    assert kept.n == 2 and kept.artifact.name == "model.pt"
    assert model.cfg["n_layer"] == 2 and mod.__name__ != "train"  # built by the commit's own train.py
    assert run_tokenizer(run).kind == "byte"
    with pytest.raises(SystemExit):
        find_kept(run, "0000000")


def test_generate_cli_streams_text(tmp_path, capsys):
    run, commits = make_run(tmp_path)
    assert gen.main(["--run", str(run), "--commit", commits[1][:7], "--prompt", "ab",
                     "--max-new-tokens", "12", "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("ab") and len(out) > 2
    assert "12 tokens" in err and commits[1][:7] in err


def test_streamer_holds_back_split_characters():
    class ByteTok:
        def decode(self, ids):
            return bytes(ids).decode("utf-8", errors="replace")
    buf = io.StringIO()
    s = gen.Streamer(ByteTok(), buf)
    for b in "é!".encode():
        s(torch.tensor([b]))
    assert buf.getvalue() == "é!"


def test_bench_all_kept_writes_json_per_commit(tmp_path, capsys):
    import json

    from inference import bench
    run, commits = make_run(tmp_path)
    assert bench.main(["--run", str(run), "--all-kept", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(commits[0][:7]) and "decode b1" in lines[0]
    big, small = (json.loads((run / "bench" / f"{c[:7]}.json").read_text()) for c in commits)
    for r in (big, small):
        assert r["prefill_tok_s"] > 0 and r["decode_tok_s_b8"] > 0 and r["ms_per_token_b1"] > 0
        assert r["decode_prompt"] + r["decode_steps"] == 64  # the decode fills the context...
        assert r["kv_bytes_per_token"] == r["kv_bytes_per_token_measured"]  # ...so the analytic figure is exact
        assert r["peak_memory_mb"] > 0
    assert big["params"] > small["params"] and big["kv_bytes_per_token"] > small["kv_bytes_per_token"]
    # 4 layers (S,L,S,L with w=16) x 2 kv heads x 16 dims x K,V x 4 bytes over a 64-token context
    assert big["kv_bytes_per_token"] == 2 * 2 * 16 * 4 * (64 + 16 + 64 + 16) / 64


def test_speculative_greedy_output_is_the_targets(tmp_path):
    from inference.speculative import speculative_generate
    target = random_model(tiny_config(), seed=3)
    other = random_model(tiny_config(n_layer=2, n_embd=32, n_kv_head=1), seed=4)  # unrelated: ~all rejected
    near = random_model(tiny_config(), seed=3)  # the target's weights, perturbed: partly accepted
    with torch.no_grad():
        for p in near.parameters():
            p.add_(0.01 * torch.randn_like(p))
    prompt = torch.tensor([[1, 5, 9, 2]])
    ref = gen.generate(target, train, prompt, 30, temperature=0.0)
    for k in range(1, 9):
        for draft in (other, near) if k in (1, 8) else (near,):
            out, st = speculative_generate(target, train, draft, train, prompt, 30, k)
            assert out.tolist() == ref.tolist(), f"k={k}"
            assert st.proposed > 0
        assert 0 < st.acceptance_rate < 1 and st.rounds < 30  # the near draft saved target passes
    out, st = speculative_generate(target, train, target, train, prompt, 30, 4)  # a perfect draft
    assert out.tolist() == ref.tolist() and st.acceptance_rate == 1.0 and st.mean_accepted == 4.0


def test_speculative_cli_reports_every_k(tmp_path, capsys):
    import json

    from inference import speculative
    run, commits = make_run(tmp_path)
    assert speculative.main(["--run", str(run), "--target", commits[0][:7], "--draft", commits[1][:7],
                             "--max-new-tokens", "20", "--ks", "1,3"]) == 0
    out = capsys.readouterr().out
    assert "k=1 |" in out and "k=3 |" in out and "identical True" in out
    report = json.loads((run / "bench" / f"speculative-{commits[0][:7]}-{commits[1][:7]}.json").read_text())
    assert [r["k"] for r in report["by_k"]] == [1, 3] and report["tokens"] == 20


def test_dashboard_shows_bench_figures_beside_val_bpb(tmp_path):
    import json

    from dashboard.app import create_app
    run, commits = make_run(tmp_path)
    short = commits[0][:7]
    (run / "results.tsv").write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
                                     f"{short}\t2.100000\t0.1\tkeep\tmodel 1\n"
                                     f"{commits[1][:7]}\t2.200000\t0.1\tkeep\tmodel 2\n")
    (run / "bench").mkdir()
    (run / "bench" / f"{short}.json").write_text(json.dumps({"decode_tok_s_b1": 123.4, "kv_bytes_per_token": 640.0}))
    (run / "bench" / f"{commits[1][:7]}.json").write_text(json.dumps({"decode_tok_s_b1": float("nan")}))
    (run / "flywheel_report.json").write_text(json.dumps({"ratios": [
        {"ratio": 0.3, "real_val_loss": 4.2395, "mixed_val_loss": 4.273, "relative": 0.0079, "verdict": "neutral"},
        {"ratio": "x", "verdict": "<b>gain</b>"}, "junk"]}))
    page = create_app(runs_dir=tmp_path).test_client().get("/", follow_redirects=True).get_data(as_text=True)
    assert ">serve</th>" in page and "123 · 640" in page
    assert page.count("—</td>") >= 1  # the second commit's broken figures are not shown
    scatter = page.split('id="serving-panel"', 1)[1].split("</section>", 1)[0]
    flywheel = page.split('id="flywheel-panel"', 1)[1].split("</section>", 1)[0]
    assert "4.2730" in flywheel and "neutral" in flywheel and "&lt;b&gt;gain" in flywheel and "<b>" not in flywheel
    assert scatter.count("<circle") == 1 and f"{short}: val_bpb 2.100000, 123 tok/s" in scatter


def test_bench_and_flywheel_files_survive_the_loops_clean_up(tmp_path):
    from agent import gitops
    run, _ = make_run(tmp_path)
    (run / "bench").mkdir()
    (run / "bench" / "abc1234.json").write_text("{}")
    (run / "flywheel_report.json").write_text("{}")
    (run / "stray.py").write_text("x = 1\n")
    removed = gitops.clean_worktree(run)
    assert "stray.py" in removed and not (run / "stray.py").exists()
    assert (run / "bench" / "abc1234.json").exists() and (run / "flywheel_report.json").exists()


def test_speculative_from_artifact_files(tmp_path, capsys):
    import json

    from inference import speculative
    run, _ = make_run(tmp_path)
    out = tmp_path / "spec.json"
    art = run / "artifacts"
    assert speculative.main(["--run", str(run), "--target-artifact", str(art / "exp-0001" / "model.pt"),
                             "--draft-artifact", str(art / "exp-0002" / "model.pt"), "--max-new-tokens", "10",
                             "--ks", "2", "--out", str(out)]) == 0
    assert "target exp-0001 draft exp-0002" in capsys.readouterr().out
    assert json.loads(out.read_text())["by_k"][0]["identical_to_target"] is True


def test_sweep_draft_survivors_are_the_top_rungs_finishers(tmp_path):
    import json

    from search.space import config_id
    from inference.sweep_draft import candidate_file, survivors
    recs = [{"kind": "sweep_task", "cand": "a", "steps": 3, "val_bpb": 2.0, "config": {"DEPTH": 2}},
            {"kind": "sweep_task", "cand": "b", "steps": 9, "val_bpb": 1.9, "config": {"DEPTH": 4}},
            {"kind": "sweep_task", "cand": "c", "steps": 9, "val_bpb": None, "config": {"DEPTH": 6}},
            {"kind": "sweep_task", "cand": "d", "steps": 9, "val_bpb": 1.8, "config": {"DEPTH": 3}}]
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + "{torn")
    assert sorted(r["cand"] for r in survivors(tmp_path)) == ["b", "d"]   # top rung, not crashed
    path = candidate_file(tmp_path, {"DEPTH": 3})
    assert path.parent.name == "candidates" and config_id({"DEPTH": 3}) in path.name
