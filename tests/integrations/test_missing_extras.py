"""Issue 36 item 5: importing the Flower integration without its extra names the install command
(the Opacus one: tests/integrations/test_opacus.py)."""

import subprocess
import sys


def test_missing_flower_extra_names_its_install_command():
    code = ("import sys; sys.modules['flwr'] = None\n"  # blocks the import as if not installed
            "try:\n    import silodp.integrations.flower\n"
            "except ModuleNotFoundError as e:\n    print(e.name, '|', e)\nelse:\n    print('imported')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == ("flwr | silodp.integrations.flower needs flwr, which is not installed: "
                           "pip install 'silodp[flower]'")
