import { DuckDBInstance } from '@duckdb/node-api';
const files = process.argv.slice(2);
const inst = await DuckDBInstance.create(':memory:');
const con = await inst.connect();
const list = '[' + files.map(f => `'${f.replaceAll("'", "''")}'`).join(',') + ']';
const reader = await con.runAndReadAll(`SELECT "partition", "offset", topic, to_base64(value) AS value, source FROM read_parquet(${list}) ORDER BY "partition", "offset"`);
for (const row of reader.getRowObjectsJson()) console.log(JSON.stringify(row));
