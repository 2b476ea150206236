"""The closing lines of `make test`: each phase's counts, exit status and seconds, then both phases'
total as one line ``N passed, M failed`` (failed counts errors too, and a phase that ended without a
summary). Exits 1 if either phase failed. Usage: test_summary.py (LABEL COUNTS.json STATUS SECONDS)..."""
import json
import sys

def main(argv: list[str]) -> int:
    passed = failed = 0
    ok = True
    for label, path, status, seconds in zip(argv[0::4], argv[1::4], argv[2::4], argv[3::4]):
        status = int(status)
        try:
            with open(path) as f:
                n = json.load(f)
        except (OSError, ValueError):
            n = None
        if n is None:   # pytest ended before its summary (usage error, crash); 5 is "no test selected"
            print(f"make test: {label}: no summary, pytest exit status {status}, {seconds} s")
            failed += status != 5
            ok &= status == 5
            continue
        failed += n["failed"] + n["error"] or status not in (0, 5)   # an interrupted or unusable run fails
        passed += n["passed"]
        ok &= status in (0, 5) and not n["failed"] and not n["error"]
        print(f"make test: {label}: {n['passed']} passed, {n['failed']} failed, {n['error']} errors, "
              f"{n['skipped']} skipped, pytest exit status {status}, {seconds} s")
    print(f"{passed} passed, {failed} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
