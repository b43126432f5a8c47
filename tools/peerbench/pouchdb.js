// PouchDB, the peer syncd's benchmarks measure beside themselves in the same
// run (client and server benchmarks start it through peer_bench_test.go):
//
//   node pouchdb.js server DIR      a PouchDB server (express-pouchdb over
//                                   LevelDB in DIR) on 127.0.0.1, printing
//                                   "listening PORT" once it serves
//   node pouchdb.js put URL N       N sequential awaited puts of ~200-byte
//                                   documents to the database at URL
//   node pouchdb.js replicate URL N N documents written to a local LevelDB
//                                   database first, then replicated to URL
//
// put and replicate print one line, "puts/s X" or "docs/s X", the rate over
// the timed part only. LevelDB writes without fsync: that is the durability
// PouchDB offers, and why syncd's side of the comparison runs at
// synchronous=NORMAL.
'use strict';
const path = require('path');
const PouchDB = require('pouchdb');

const [mode, arg, count] = process.argv.slice(2);
const n = Number(count);

function doc(i) {
  return { _id: 'doc' + String(i).padStart(8, '0'), title: 'document ' + i, body: 'x'.repeat(160), n: i };
}

async function serve(dir) {
  const express = require('express');
  const Local = PouchDB.defaults({ prefix: dir + path.sep });
  const app = express();
  app.use('/', require('express-pouchdb')(Local, { mode: 'minimumForPouchDB', logPath: path.join(dir, 'log.txt') }));
  const server = app.listen(0, '127.0.0.1', () => console.log('listening ' + server.address().port));
  process.on('SIGTERM', () => server.close(() => process.exit(0)));
}

async function put(url) {
  const db = new PouchDB(url);
  await db.info(); // creates the database before the clock starts
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await db.put(doc(i));
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  console.log('puts/s ' + (n / s).toFixed(1));
}

async function replicate(url) {
  const dir = require('fs').mkdtempSync(path.join(require('os').tmpdir(), 'peerbench-'));
  const local = new PouchDB(path.join(dir, 'local'));
  for (let i = 0; i < n; i += 1000) {
    const docs = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) docs.push(doc(j));
    await local.bulkDocs(docs);
  }
  const start = process.hrtime.bigint();
  const res = await local.replicate.to(url);
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  if (res.docs_written !== n) throw new Error('replicated ' + res.docs_written + ' of ' + n);
  console.log('docs/s ' + (n / s).toFixed(1));
  await local.destroy();
}

const modes = { server: () => serve(arg), put: () => put(arg), replicate: () => replicate(arg) };
if (!modes[mode] || (mode !== 'server' && !(n > 0))) {
  console.error('usage: node pouchdb.js server DIR | put URL N | replicate URL N');
  process.exit(2);
}
modes[mode]().catch((err) => { console.error(err); process.exit(1); });
