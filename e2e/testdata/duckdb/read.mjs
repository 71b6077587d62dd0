import { DuckDBInstance } from '@duckdb/node-api';
const files = process.argv.slice(2);
const inst = await DuckDBInstance.create(':memory:');
const con = await inst.connect();
const list = '[' + files.map(f => `'${f.replaceAll("'", "''")}'`).join(',') + ']';
// union_by_name: files written before the principal column existed lack
// it and read it as NULL.
const reader = await con.runAndReadAll(`SELECT "partition", "offset", topic, to_base64(value) AS value, source, principal FROM read_parquet(${list}, union_by_name = true) ORDER BY "partition", "offset"`);
for (const row of reader.getRowObjectsJson()) console.log(JSON.stringify(row));
