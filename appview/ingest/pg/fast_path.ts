import type postgres from "postgres";
import type { PendingOp } from "./pg_writer.ts";

export interface Run {
  readonly fast: boolean;
  readonly ops: PendingOp[];
}

export function planRuns(pending: readonly PendingOp[], _ids: ReadonlyMap<string, number>): Run[] {
  return [{ fast: false, ops: [...pending] }];
}

export function applyFast(
  _sql: postgres.TransactionSql,
  _ops: readonly PendingOp[],
): Promise<postgres.RowList<postgres.Row[]>>[] {
  return [];
}
