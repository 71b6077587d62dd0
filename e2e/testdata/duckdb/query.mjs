// node query.mjs SQL FILE... runs SQL, in which FILES stands for
// read_parquet([FILE...], union_by_name = true), and prints each row as JSON.
import { DuckDBInstance } from '@duckdb/node-api';
const [sql, ...files] = process.argv.slice(2);
const inst = await DuckDBInstance.create(':memory:');
const con = await inst.connect();
const list = '[' + files.map(f => `'${f.replaceAll("'", "''")}'`).join(',') + ']';
const reader = await con.runAndReadAll(sql.replaceAll('FILES', `read_parquet(${list}, union_by_name = true)`));
for (const row of reader.getRowObjectsJson()) console.log(JSON.stringify(row));
