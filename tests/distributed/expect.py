"""tests/distributed/expect.py - the checks the failure scripts (timeout.py, gloo_failures.py, real_torchrun.py) make of
one run: exit statuses, lines that must or must not appear, and how long it took. Prints ok or
FAIL with the problems and the run's output; `failures` collects the names that failed."""
failures = []


def expect(name, result, status=None, statuses=None, has=(), lacks=(), within=20.0):
    """result: (exit status, or a list of them by rank; output; seconds). status: the one
    process's expected status; statuses: {rank: expected status}."""
    codes, out, seconds = result
    problems = []
    if status is not None and codes != status:
        problems.append(f"exit status {codes}, expected {status}")
    for r, want in (statuses or {}).items():
        if codes[r] != want:
            problems.append(f"rank {r} exit status {codes[r]}, expected {want}")
    for s in has:
        if s not in out:
            problems.append(f"output lacks {s!r}")
    for s in lacks:
        if s in out:
            problems.append(f"output has {s!r}")
    if seconds > within:
        problems.append(f"took {seconds:.1f} s, expected under {within} s")
    print(f"{'ok  ' if not problems else 'FAIL'} {name} ({seconds:.1f} s, exit {codes})")
    if problems:
        failures.append(name)
        print("  " + "\n  ".join(problems) + "\n--- output\n" + out)
