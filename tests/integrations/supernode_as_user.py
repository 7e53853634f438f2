"""A SuperNode whose ClientApp processes run as an unprivileged user, for the OS-boundary test
(``test_silo_service.py``). Run as root: ``python supernode_as_user.py USER HOME -- SUPERNODE ARGS``.

The interpreter of this machine lives where only root may read it (``/root/.pyenv``), so a
process of another user cannot start it. This launcher therefore starts as root, imports
everything the SuperNode, Flower's SuperExec and the ClientApp need, then drops to ``USER``'s uid
and gid for good (``os.setgroups([])``, ``os.setgid``, ``os.setuid``) before it serves anything:

* a forked child runs the SuperNode (``flower-supernode ARGS --isolation process``: it starts no
  ClientApp process of its own);
* this process runs Flower's SuperExec loop (``run_superexec``) against the SuperNode's runtime
  API, with an executor that forks (without exec: the interpreter is already loaded) one child
  per task, which runs Flower's ``run_clientapp``: the app bundle the server shipped is installed
  and its ClientApp executed as ``USER``.

``HOME`` (a directory ``USER`` owns) is the ``FLWR_HOME`` where the bundles are installed.
Stop it by its process group (SIGTERM): the SuperNode and any ClientApp go with it.
"""

import os
import signal
import sys
import traceback


def forked(run) -> None:
    """``run()`` in a forked child (this interpreter, no exec), which exits with its status."""
    if os.fork() != 0:
        return
    code = 1
    try:
        run()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str]) -> None:
    user, home, sep, *supernode_args = argv
    assert sep == "--", "usage: supernode_as_user.py USER HOME -- SUPERNODE ARGS"
    # everything imported while root can read the interpreter's standard library
    import argparse  # noqa: F401
    import base64  # noqa: F401
    import importlib
    import pwd
    import sqlite3  # noqa: F401
    import tempfile  # noqa: F401
    import tomllib  # noqa: F401
    import zipfile  # noqa: F401

    import encodings  # every codec (zipfile's cp437 among them) is found lazily, by name
    import pkgutil

    for codec in pkgutil.iter_modules(encodings.__path__):
        try:
            importlib.import_module(f"encodings.{codec.name}")
        except ImportError:  # another platform's (mbcs, oem)
            pass

    import flwr.app  # noqa: F401
    import flwr.clientapp  # noqa: F401
    import importlib

    import httpx  # noqa: F401
    import numpy  # noqa: F401
    from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
    from flwr.supercore.superexec.executor.types import LaunchResult
    from flwr.supernode.runtime.run_clientapp import run_clientapp

    import silodp.integrations.flower  # noqa: F401
    import silodp.integrations.flower_silo  # noqa: F401
    import silodp.service.client  # noqa: F401
    import silodp.service.core  # noqa: F401
    import silodp.service.plan  # noqa: F401

    # the modules (their packages export functions of the same names)
    superexec = importlib.import_module("flwr.supercore.superexec.run_superexec")
    supernode_cli = importlib.import_module("flwr.supernode.cli.flower_supernode")

    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    assert os.getuid() == os.geteuid() == entry.pw_uid and os.getgid() == entry.pw_gid
    os.environ.update(HOME=home, FLWR_HOME=home)
    os.chdir(home)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the forked tasks

    sys.argv = ["flower-supernode", *supernode_args, "--isolation", "process"]
    forked(supernode_cli.flower_supernode)

    class ForkExecutor(SubprocessExecutor):
        """One forked child per task, running Flower's ``run_clientapp`` (no exec)."""

        def launch(self, spec):
            forked(lambda: run_clientapp(spec.runtime_api_address, spec.token, spec.insecure))
            return LaunchResult.accepted()

    superexec.get_executor = lambda *args, **kwargs: ForkExecutor()
    port = supernode_args[supernode_args.index("--port") + 1]
    superexec.run_superexec(runtime_api_address=f"127.0.0.1:{port}", insecure=True)


if __name__ == "__main__":
    main(sys.argv[1:])
