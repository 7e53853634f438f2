"""Run the example on Flower's simulation engine from Python (needs ``flwr[simulation]``, which
brings Ray), run config in ``flwr run``'s syntax over the settings' defaults::

    python run_simulation.py 'algorithm="isrl-spider" epsilon=8.0 rounds=12'

(no ``accountant``: the default calibrates with the tightest certificate; ``accountant="rdp"``
over-noises, the silos' ledgers then certify far below the target.)

From the command line through a SuperLink, with the pyproject's config: ``flwr run .`` (see
docs/integrations.md)."""

import sys

from flwr.common.config import parse_config_args

from silodp_flower.server_app import summary
from silodp_flower.simulation import simulate
from silodp_flower.task import Settings

if __name__ == "__main__":
    print(summary(simulate(Settings.from_run_config(parse_config_args(sys.argv[1:])))))
