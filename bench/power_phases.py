# The card's clocks and power during each step of a device command, from an nvidia-smi log sampled beside it.
# On an H100 the DiT forward runs at the card's 700 W cap: SM clocks fall from 1,980 to ~1,450 MHz and the
# forward's GEMMs run ~12 % under their rate in 20-call bursts (BENCHMARKS.md, session 37), so a figure means
# little without the clocks it ran at. bench/vsa_row.sh samples nvidia-smi every 100 ms into OUT/smi.csv, marks
# each step in OUT/marks.txt and appends this table to its summary.md.
#
#   python3 bench/power_phases.py OUT/smi.csv OUT/marks.txt
#   python3 bench/power_phases.py --self-test
#
# smi.csv: nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,
# clocks_event_reasons.active --format=csv,noheader (local time, as nvidia-smi prints it); marks.txt: lines
# "STEP EPOCH_SECONDS", each step running until the next mark (a step named "end" closes the last). Only busy samples (utilization >= 90 %) count:
# compiles and host work between programs leave the card idle at full clocks.
import argparse, csv, datetime, io, statistics, sys

POWER_CAP = 0x4  # clocks_event_reasons: SW power cap


def samples(text):
    out = []
    for r in csv.reader(io.StringIO(text)):
        if len(r) < 7:
            continue
        try:
            t = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append({"t": t, "mhz": float(r[1].split()[0]), "watts": float(r[3].split()[0]),
                        "util": float(r[5].split()[0]), "capped": int(r[6].strip(), 16) & POWER_CAP != 0})
        except ValueError:
            continue  # nvidia-smi's "[N/A]" or an error line
    return out


def marks(text):
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((parts[0], float(parts[1])))
    return out


def table(smi, mk):
    rows = ["| step | busy samples | SM MHz median (min-max) | W median | at the power cap |", "|---|---|---|---|---|"]
    spans = list(zip(mk, mk[1:] + [("", float("inf"))]))
    for (name, a), (_, b) in spans:
        if name == "end":  # the mark a script writes when its last step is over
            continue
        busy = [s for s in smi if a <= s["t"] < b and s["util"] >= 90]
        if not busy:
            rows.append(f"| {name} | 0 | | | |")
            continue
        mhz = [s["mhz"] for s in busy]
        rows.append(f"| {name} | {len(busy)} | {statistics.median(mhz):.0f} ({min(mhz):.0f}-{max(mhz):.0f}) | "
                    f"{statistics.median(s['watts'] for s in busy):.0f} | {sum(s['capped'] for s in busy)} of {len(busy)} |")
    return "\n".join(rows)


def self_test():
    base = datetime.datetime(2026, 12, 6, 19, 59, 23)
    lines = []
    for i in range(40):
        t = base + datetime.timedelta(seconds=0.1 * i)
        mhz, watts, util, reason = (1980, 120.0, 0, "0x0000000000000000") if i < 10 else (1335 + i, 698.0, 100, "0x0000000000000004")
        lines.append(f"{t.strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, {mhz} MHz, 2619 MHz, {watts:.2f} W, 60, {util} %, {reason}")
    lines.append("[N/A], [N/A]")
    smi = samples("\n".join(lines))
    assert len(smi) == 40, len(smi)
    mk = marks(f"idle {base.timestamp()}\nwork {(base + datetime.timedelta(seconds=1)).timestamp()}\n"
               f"end {(base + datetime.timedelta(seconds=3.5)).timestamp()}\n")
    got = table(smi, mk).splitlines()
    assert len(got) == 4, got
    assert got[2] == "| idle | 0 | | | |", got[2]
    assert got[3] == "| work | 25 | 1357 (1345-1369) | 698 | 25 of 25 |", got[3]
    print("power_phases self-test: ok")


def main():
    ap = argparse.ArgumentParser(description="nvidia-smi samples summarised per marked step")
    ap.add_argument("smi", nargs="?")
    ap.add_argument("marks", nargs="?")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.smi or not a.marks:
        ap.error("give SMI.csv and MARKS.txt, or --self-test")
    with open(a.smi, errors="replace") as f:
        smi = samples(f.read())
    with open(a.marks) as f:
        mk = marks(f.read())
    print(table(smi, mk))


if __name__ == "__main__":
    sys.exit(main())
