"""One rank of tests/test_parallel.py, started by it with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set:

    python _parallel_rank.py SEED STRATEGY UPDATES OUT MODE

The backend: $SPLAT_TEST_BACKEND, cpu (the default) or cuda (deterministic).

MODE: train (UPDATES updates, the state saved to OUT.rankR.npz), die (rank 1
leaves after 3 updates without a word), diverge (rank 1 starts from other
parameters). Exit 7: a RankFailure, 8: RanksDiverged (the message in OUT.rankR.txt)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import splat  # noqa: E402
from splat.parallel import DataParallelTrainer, ProcessGroup, RankFailure, RanksDiverged  # noqa: E402


def backend_config():
    if os.environ.get("SPLAT_TEST_BACKEND", "cpu") == "cuda":
        return splat.BackendConfig(backend="cuda", deterministic=True)
    return splat.BackendConfig(backend="cpu")


def scene(seed, strategy):
    from test_training import make_dataset, random_gaussians, small_config
    rng = np.random.default_rng(seed)
    ds = make_dataset(rng, random_gaussians(rng, 40), n_views=6)
    init = random_gaussians(rng, 120)
    if strategy == "mcmc":
        cfg = small_config(steps=60, strategy="mcmc", mcmc_refine_from=6, mcmc_refine_every=8, mcmc_refine_until=40,
                           max_gaussians=150, seed=seed % 1000)
    else:  # default, exposure or visible_adam: the default recipe, with that mode on
        cfg = small_config(steps=60, densify_from=6, densify_every=8, densify_until=40, opacity_reset_every=24,
                           seed=seed % 1000, exposure=strategy == "exposure", visible_adam=strategy == "visible_adam")
    # visible_adam: spread 4x wider, so each view sees about half of them and two
    # views' sets differ in a fifth (what the ranks' union of radii decides).
    means = init.means * np.float32(4) if strategy == "visible_adam" else init.means
    state = dict(means=means, log_scales=init.log_scales, quats=init.quats,
                 opacity_logits=init.opacity_logits, sh=init.sh)
    return ds, cfg, state


def main():
    seed, strategy, updates, out, mode = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    group = ProcessGroup.from_env(timeout=30.0)
    rank = group.rank
    ds, cfg, state = scene(seed, strategy)
    if mode == "diverge" and rank == 1:
        state = dict(state, means=state["means"] + np.float32(1e-3))
    try:
        tr = DataParallelTrainer(ds, cfg, backend_config(), group, state=state, check_every=4)
        losses = []
        for u in range(updates):
            if mode == "die" and rank == 1 and u == 3:
                os._exit(0)
            losses.append(tr.step(read_loss=(u + 1) % 5 == 0).loss)
    except RankFailure as exc:
        open(f"{out}.rank{rank}.txt", "w").write(str(exc))
        sys.exit(7)
    except RanksDiverged as exc:
        open(f"{out}.rank{rank}.txt", "w").write(str(exc))
        sys.exit(8)
    np.savez(f"{out}.rank{rank}.npz", step=tr.step_count, losses=np.array(losses, np.float64), **tr.state())
    group.close()


if __name__ == "__main__":
    main()
