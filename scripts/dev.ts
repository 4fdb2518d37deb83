/**
 * `deno task dev`: the whole system in one process on embedded defaults. The account host and
 * the index are not built yet; until they are, this says so instead of pretending.
 */

const NOT_BUILT = [
  "account host (pds/): not built yet",
  "index (appview/): not built yet",
];

if (import.meta.main) {
  console.error("deno task dev: nothing to run yet.");
  for (const line of NOT_BUILT) console.error(`  - ${line}`);
  Deno.exit(1);
}
