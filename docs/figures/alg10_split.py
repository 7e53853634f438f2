"""The two budget splits of SDP FedProx-SPIDER (paper Alg 10) side by side: the table of
docs/paper-notes.md, accounting note 8.

    python docs/figures/alg10_split.py                 # about 2.5 minutes on the 2 shared cores
    python docs/figures/alg10_split.py --store S.db    # at the SDP-SPIDER (q >= 2) transcripts of a
                                                       # results store (silodp reproduce), both splits

For each (R, q): the paper's per-invocation budgets of line 8 (anchor, eps~_1) and line 12
(difference, eps~_2), and what the tight calibration (one scale over the paper's budget shape,
certified by the exact P_vec certificates of the whole transcript) gives: the binomial trials b of
each message group (the P_vec noise variance is proportional to b) and the certified epsilon.
"""

from __future__ import annotations

from silodp.accounting import papers
from silodp.algorithms.privacy import calibrate_algorithm, stored_transcript
from silodp.algorithms.spider import SdpSpider, second_batch

#: the setting of the rates presets for Thm 3.1 (sigmoid-l1, d = 11, M = N = 4, n = 250), eps = 1
SETTING = dict(n=250, batch_size=250, num_silos=4, dimension=11, beta=0.16, clip=0.21)
EPS, DELTA = 1.0, 1e-5
GRID = ((20, 4), (40, 4), (20, 20))


def rows() -> list[dict]:
    out = []
    for rounds, q in GRID:
        cfg = SdpSpider.plan.transcript(rounds=rounds, period=q, **SETTING)
        for split in papers.ALG10_SPLITS:
            b = papers.alg10_pvec(EPS, DELTA, cfg.num_silos, cfg.m, cfg.n, cfg.batch_size, second_batch(cfg), rounds, q, split)
            cal = calibrate_algorithm(SdpSpider.with_split(split), cfg, EPS, DELTA, "tight")
            out.append({"R": rounds, "q": q, "split": split, "eps1": b["epsilon1"], "eps2": b["epsilon2"],
                        "b_grad": cal.shuffle["grad"]["b"], "b_diff": cal.shuffle["diff"]["b"],
                        "certified": cal.epsilon})
    return out


def store_rows(store: str) -> list[dict]:
    """Both splits at every SDP-SPIDER q >= 2 transcript whose calibration ``store`` holds."""
    import json
    import sqlite3

    out = []
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        requests = [json.loads(r) for (r,) in db.execute("SELECT request FROM calibrations")]
    for req in requests:
        if req["algorithm"] != "sdp-spider":
            continue
        cfg = stored_transcript(req["transcript"], SdpSpider.Transcript)  # before round 7: the period is q
        if cfg.period < 2:
            continue
        for split in papers.ALG10_SPLITS:
            cal = calibrate_algorithm(SdpSpider.with_split(split), cfg, req["epsilon"], req["delta"], "tight")
            out.append({"eps": req["epsilon"], "R": cfg.rounds, "q": cfg.period, "n": cfg.n, "K": cfg.batch_size,
                        "split": split, "b_grad": cal.shuffle["grad"]["b"], "b_diff": cal.shuffle["diff"]["b"],
                        "certified": cal.epsilon})
    return out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default=None, help="a results store: its SDP-SPIDER q >= 2 transcripts")
    args = ap.parse_args()
    if args.store:
        print("| eps | n | K | R | q | split | b anchor | b difference | certified eps |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in store_rows(args.store):
            print(f"| {r['eps']:g} | {r['n']} | {r['K']} | {r['R']} | {r['q']} | {r['split']} | {r['b_grad']} | "
                  f"{r['b_diff']} | {r['certified']:.4f} |")
        return
    print(f"n = {SETTING['n']}, K1 = K2 = n, M = N = {SETTING['num_silos']}, d = {SETTING['dimension']}, "
          f"eps = {EPS}, delta = {DELTA}, tight calibration")
    print()
    print("| R | q | split | paper eps~_1 (anchor) | paper eps~_2 (difference) | b anchor | b difference | certified eps |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows():
        print(f"| {r['R']} | {r['q']} | {r['split']} | {r['eps1']:.4f} | {r['eps2']:.4f} | {r['b_grad']} | "
              f"{r['b_diff']} | {r['certified']:.4f} |")


if __name__ == "__main__":
    main()
