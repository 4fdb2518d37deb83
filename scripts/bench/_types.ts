/** One figure measured by a benchmark, compared with its budget (docs/behaviour.md 12). */
export interface BenchResult {
  /** What was measured, e.g. "index ingest (applyOps, realistic mix)". */
  name: string;
  figure: number;
  /** Unit of {@link figure}, e.g. "ops/s" or "ms p99". */
  unit: string;
  /** The budget in words, e.g. ">= 20,000 ops/s"; "-" when informational. */
  budget: string;
  /** Whether the figure meets the budget (true for informational rows). */
  pass: boolean;
  /**
   * Shown instead of the figure and unit when the figure is only a bound, e.g. "< 50 ms" when
   * the browser reports no frame of 50 ms or more.
   */
  shown?: string;
  /** How the figure was measured, printed under the table. */
  note?: string;
}

/** The index's ingest budget (docs/behaviour.md 12), in ops a second. */
export const INGEST_BUDGET_OPS_PER_SECOND = 20_000;

/** A row measured against the ingest budget: `figure` ops a second. */
export function ingestBudgetRow(name: string, figure: number): BenchResult {
  return {
    name,
    figure,
    unit: "ops/s",
    budget: ">= 20,000 ops/s",
    pass: figure >= INGEST_BUDGET_OPS_PER_SECOND,
  };
}

/** An informational row: no budget, so it always passes. */
export function informationalRow(name: string, figure: number, unit: string): BenchResult {
  return { name, figure, unit, budget: "-", pass: true };
}

/** Percentile (0-100) of a list of numbers, by nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

function formatFigure(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  return n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(2);
}

/** Prints results as one table (name, figure, budget, pass/MISS), then the rows' notes. */
export function printTable(rows: readonly BenchResult[]): void {
  const notes: string[] = [];
  const cells = rows.map((r) => {
    let name = r.name;
    if (r.note !== undefined) {
      notes.push(`[${notes.length + 1}] ${r.note}`);
      name += ` [${notes.length}]`;
    }
    return [
      name,
      r.shown ?? `${formatFigure(r.figure)} ${r.unit}`,
      r.budget,
      r.pass ? "pass" : "MISS",
    ];
  });
  const header = ["benchmark", "figure", "budget", "result"];
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) => c.map((v, i) => v.padEnd(widths[i])).join("  ");
  console.log(line(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const c of cells) console.log(line(c));
  if (notes.length > 0) console.log("");
  for (const n of notes) console.log(n);
}
