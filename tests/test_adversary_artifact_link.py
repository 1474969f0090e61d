"""A run's model artifact must be its own file. The run writes artifacts/exp-NNNN/ inside its
sandbox, but the harness reads model.pt outside it: a symlink there (to an absolute path the
sandbox never saw) was followed, so another file (an earlier experiment's model, trained past its
budget and discarded for it, saved with this commit's train.py hash) was evaluated as this run's."""
import os

from harness.verify import Evaluation, eval_rows, verify
from tests.test_verify import SRC, make_artifact


def test_a_linked_artifact_is_refused_before_anything_runs(tiny_cache, tmp_path):
    import prepare
    elsewhere = tmp_path / "earlier"
    elsewhere.mkdir()
    art, bpb = make_artifact(SRC, elsewhere)
    out = tmp_path / "artifacts" / "exp-0007"
    out.mkdir(parents=True)
    os.symlink(art, out / "model.pt")
    what = Evaluation(SRC, open(prepare.__file__).read(), eval_rows("tiny"), printed_bpb=bpb, sealed=True)
    r = verify(out / "model.pt", what)
    assert not r.ok and "link" in r.reason and r.trusted_bpb is None
    # the same file, as the run's own, is evaluated (the refusal is the link's, not the model's)
    os.unlink(out / "model.pt")
    os.link(art, out / "model.pt")
    r = verify(out / "model.pt", what)
    assert r.ok, r.reason
