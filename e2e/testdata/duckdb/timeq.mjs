// node timeq.mjs RUNS SQL FILE... runs SQL (FILES stands for read_parquet
// of the files, union_by_name) RUNS times after one warm-up run and prints
// {"ms": best wall time of one run, "rows": rows of the result}.
import { DuckDBInstance } from '@duckdb/node-api';
const [runs, sql, ...files] = process.argv.slice(2);
const inst = await DuckDBInstance.create(':memory:');
const con = await inst.connect();
const list = '[' + files.map(f => `'${f.replaceAll("'", "''")}'`).join(',') + ']';
const q = sql.replaceAll('FILES', `read_parquet(${list}, union_by_name = true)`);
let rows = (await con.runAndReadAll(q)).getRowObjectsJson().length;
let best = Infinity;
for (let i = 0; i < Number(runs); i++) {
  const t0 = performance.now();
  rows = (await con.runAndReadAll(q)).getRowObjectsJson().length;
  best = Math.min(best, performance.now() - t0);
}
console.log(JSON.stringify({ ms: best, rows }));
