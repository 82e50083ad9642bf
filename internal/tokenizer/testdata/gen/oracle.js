// usage: node oracle.js path/to/tokenizer.json < texts.json  (a JSON array of strings)
// reads JSON array of strings on stdin, prints JSON lines {text, ids, tokens, dec}
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
(async () => {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const texts = JSON.parse(fs.readFileSync(0, 'utf8'));
  const out = [];
  for (const t of texts) {
    const e = await tok.encode(t, null, {addSpecialTokens:false});
    const ids = e.getIds();
    const dec = await tok.decode(ids, false);
    out.push(JSON.stringify({text:t, ids:ids, tokens:e.getTokens(), dec:dec}));
  }
  process.stdout.write(out.join('\n')+'\n');
})();
