"""The device gate (xegemm.evaluate.gate) with real processes and real flock locks: on a CPU device a build
waits while another process times a kernel, timings never overlap, and a killed holder frees the device."""

import multiprocessing
import threading

from xegemm.evaluate.gate import DeviceGate


def _hold_timing(gate: DeviceGate, held, release) -> None:
    handle = gate.open()
    handle.timing()
    held.set()
    release.wait(30)
    handle.close()


def _waits(gate: DeviceGate, what: str, seconds: float = 0.5) -> threading.Event:
    """Take the gate for ``what`` ("building" or "timing") in a thread, then let go; the returned event is set
    once it got through."""
    done = threading.Event()

    def take():
        handle = gate.open()
        getattr(handle, what)()
        handle.close()
        done.set()

    threading.Thread(target=take, daemon=True).start()
    done.wait(seconds)
    return done


def _timing_elsewhere(tmp_path, cpu: bool):
    """A gate, and another process that holds it for timing until ``release`` is set."""
    ctx = multiprocessing.get_context("spawn")
    gate = DeviceGate(str(tmp_path), "dev", cpu=cpu)
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_timing, args=(gate, held, release))
    holder.start()
    assert held.wait(30)
    return gate, holder, release


def test_a_cpu_build_and_a_timing_wait_for_a_timing_in_another_process(tmp_path):
    gate, holder, release = _timing_elsewhere(tmp_path, cpu=True)
    build, timing = _waits(gate, "building"), _waits(gate, "timing")
    assert not build.is_set() and not timing.is_set()
    release.set()
    holder.join(10)
    assert build.wait(5) and timing.wait(5)        # both go once the timing is over


def test_a_gpu_build_does_not_wait_and_a_killed_holder_frees_the_device(tmp_path):
    gate, holder, _ = _timing_elsewhere(tmp_path, cpu=False)
    assert _waits(gate, "building").is_set()      # on a GPU the build runs beside the timing
    timing = _waits(gate, "timing")
    assert not timing.is_set()
    holder.kill()
    holder.join(10)
    assert timing.wait(5)                          # the kernel dropped the dead holder's lock
