"""Run the example on Flower's simulation engine from Python, with the settings' defaults
(needs ``pip install "flwr[simulation]"``, which brings Ray): ``python run_simulation.py``.
From the command line, with the pyproject's config: ``flwr run .``, or
``flwr run . --run-config 'algorithm="isrl-spider"'``."""

from flwr.simulation import run_simulation

from silodp_flower.client_app import app as client_app
from silodp_flower.server_app import app as server_app

if __name__ == "__main__":
    # each supernode gets its partition-id (node_config); the paper's WBCD federation has 2 silos
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=2,
                   backend_config={"client_resources": {"num_cpus": 1}})
