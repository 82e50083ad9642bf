// usage: node pretok.js path/to/tokenizer.json < texts.json  (prints the pre-tokenizer pieces)
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const tok = Tokenizer.fromFile(process.argv[2]);
const pt = tok.getPreTokenizer();
const texts = JSON.parse(fs.readFileSync(0, 'utf8'));
const out = texts.map(t => JSON.stringify({text:t, pieces: pt.preTokenizeString(t).map(p=>p[0])}));
process.stdout.write(out.join('\n')+'\n');
