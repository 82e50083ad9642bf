// usage: node decode.js path/to/tokenizer.json < seqs.json  (a JSON array of id arrays)
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
(async () => {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const seqs = JSON.parse(fs.readFileSync(0, 'utf8'));
  const out = [];
  for (const ids of seqs) out.push(JSON.stringify({ids: ids, text: await tok.decode(ids, false)}));
  process.stdout.write(out.join('\n') + '\n');
})();
