"""``silodp distributed``: calibrate distributed noise for a secure-aggregation sum
(silodp.accounting.distributed) and compare it with central DP.

    silodp distributed --mechanism binomial|skellam|discrete-gaussian --dimension D --clip C
        --silos M --bits B --epsilon E --delta DLT --rounds R [--summed N] [--vector-norm V] [--json]

Prints the noise parameter (``noise_parameter``, named by ``noise_parameter_name``: trials per
silo, local variance or local sigma in integer steps), ``bits``, ``modulus``,
``wrap_probability``, ``variance`` (per coordinate of the decoded aggregate), ``central_variance``
(central DP's Gaussian for the same transcript and epsilon), their ``ratio`` and the certified
``epsilon``. ``--summed``: the fewest silos whose messages are summed (dropouts; default M).
"""

from __future__ import annotations

from silodp.cli.domains import COUNT, DELTA, EPSILON, SCALE, Int


def register(subparsers) -> None:
    from silodp.accounting.distributed import MECHANISMS

    p = subparsers.add_parser("distributed", help="distributed noise under secure aggregation (Skellam, discrete Gaussian, binomial)")
    p.add_argument("--mechanism", choices=MECHANISMS, required=True)
    p.add_argument("--dimension", type=Int(1, 10 ** 8), required=True, help="D, coordinates of each silo's vector")
    p.add_argument("--clip", type=SCALE, required=True, help="C, the l2 clip of each silo's vector")
    p.add_argument("--silos", type=COUNT, required=True, help="M, silos that send")
    p.add_argument("--summed", type=COUNT, default=None, help="the fewest silos summed (default M)")
    p.add_argument("--bits", type=Int(2, 64), required=True, help="B: secure aggregation sums modulo 2^B")
    p.add_argument("--epsilon", type=EPSILON, required=True)
    p.add_argument("--delta", type=DELTA, required=True)
    p.add_argument("--rounds", type=Int(1, 10 ** 7), default=1, help="R releases of the sum (composed)")
    p.add_argument("--vector-norm", type=SCALE, default=None,
                   help="record level: each silo's vector (a sum of records, each <= --clip) is clipped to this")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from silodp.accounting import distributed
    from silodp.cli import emit

    params = distributed.calibrate(args.mechanism, args.dimension, args.clip, args.silos, args.bits, args.epsilon,
                                   args.delta, args.rounds, args.summed, args.vector_norm)
    out = distributed.summary(params, args.epsilon, args.delta)
    emit(out, args.json)
    return 0
