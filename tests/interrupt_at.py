"""Run `xegemm tune` as `python -m xegemm` does, held at one moment until a SIGINT arrives there
(tests/test_tune_interrupt.py): ``python interrupt_at.py MOMENT MARKER tune ARGS...``.

MOMENT: ``build`` or ``timing`` (the parent's side of a trial while its worker process builds or times it: the
builder's ``on_stage`` hook), ``after-trials`` (every trial done, before the leaders are timed again),
``writing`` (the export, before best.json is written).  MARKER is written when the moment is reached; the test
then sends SIGINT.  Nothing is faked: the tune, its worker processes, the study and the signal are real."""

import signal
import sys
import threading
import time
from pathlib import Path

import xegemm
import xegemm.evaluate.isolated as isolated
import xegemm.tune.api as api
import xegemm.tune.export as export
from xegemm.cli import main


def run() -> int:
    """Install the hold for the moment, then run the command (the worker processes import this file anew as
    ``__mp_main__``: nothing runs then)."""
    global moment, marker
    moment, marker, *argv = sys.argv[1:]
    marker = Path(marker)
    arrived = threading.Event()

    def on_sigint(signum, frame):
        arrived.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)

    def hold() -> None:
        """Say the moment is here, then wait for the signal (the main thread takes it as KeyboardInterrupt)."""
        if marker.exists():
            return
        marker.write_text(moment)
        if threading.current_thread() is threading.main_thread():
            time.sleep(300)
        else:
            arrived.wait(300)

    if moment in ("build", "timing"):
        stage = {"build": "build", "timing": "run"}[moment]
        original_init = isolated.IsolatedDeviceBuilder.__init__

        def init(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            inner = self.on_stage

            def on_stage(seen, pid):
                if inner:
                    inner(seen, pid)
                if seen == stage:
                    hold()
            self.on_stage = on_stage
        isolated.IsolatedDeviceBuilder.__init__ = init
    elif moment == "after-trials":
        original_retime = api.retime_leaders

        def retime_leaders(*args, **kwargs):
            hold()
            return original_retime(*args, **kwargs)
        api.retime_leaders = retime_leaders
    elif moment == "writing":
        original_write = export.write_json_atomic

        def write_json_atomic(path, data, *args, **kwargs):
            if Path(path).name == "best.json":
                hold()
            return original_write(path, data, *args, **kwargs)
        export.write_json_atomic = write_json_atomic
    else:
        raise SystemExit(f"unknown moment {moment}")

    sys.argv = [str(Path(xegemm.__file__).parent / "__main__.py"), *argv]     # as `python -m xegemm` sets it
    return main()


if __name__ == "__main__":
    raise SystemExit(run())
