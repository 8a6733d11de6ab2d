#!/usr/bin/env python3
"""Markdown tables for docs/BENCHMARKS.md from `calo validate --json` documents.

usage: calo validate RUNS... --cluster C --plan P --json > v.json; python3 tables.py TITLE=v.json [TITLE=v.json ...]
"""
import json
import sys


def pair(figure, scale, digits):
    measured, predicted, error = figure["measured"], figure["predicted"], figure["error"]
    if measured is None:
        return "-"
    if predicted is None:
        return f"{measured * scale:.{digits}f} / -"
    return f"{measured * scale:.{digits}f} / {predicted * scale:.{digits}f} ({error * 100:+.1f} %)"


def rho(value):
    return "-" if value is None else f"{value:.2f}"


def table(title, document):
    lines = [f"**{title}** (predicted on `{document['cluster']}`)", "",
             "| run | layout | plan # | step ms: measured / predicted | J/step per GPU | mean W per GPU | peak W |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in document["runs"]:
        figures = row["figures"]
        lines.append(f"| {row['run']} | {row['layout']} | {row['plan_rank'] or '-'} | "
                     f"{pair(figures['step_time_s'], 1e3, 1)} | {pair(figures['energy_per_step_j'], 1, 0)} | "
                     f"{pair(figures['mean_power_w'], 1, 0)} | {pair(figures['peak_power_w'], 1, 0)} |")
    lines.append("")
    lines.append(f"Largest error: step {document['max_step_error'] * 100:.1f} %, energy "
                 f"{document['max_energy_error'] * 100:.1f} %. Spearman ρ: step {rho(document['step_rho'])}, energy "
                 f"{rho(document['energy_rho'])}; over layout families {rho(document['family_step_rho'])} / "
                 f"{rho(document['family_energy_rho'])}. First pick {document['first_pick']}, measured best "
                 f"{document['measured_best']}: regret {document['regret'] * 100:+.1f} %.")
    for skipped in document["skipped"]:
        lines.append(f"Skipped {skipped['run']}: {skipped['reason'].split(';')[0]}.")
    return "\n".join(lines) + "\n"


def main(arguments):
    if not arguments:
        sys.exit(__doc__)
    for argument in arguments:
        title, _, path = argument.partition("=")
        with open(path) as file:
            print(table(title, json.load(file)))


if __name__ == "__main__":
    main(sys.argv[1:])
