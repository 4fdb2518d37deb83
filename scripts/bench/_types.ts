/** One figure measured by a benchmark, compared with its budget (DESIGN.md section 8). */
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
}

/** Percentile (0-100) of a list of numbers, by nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}
