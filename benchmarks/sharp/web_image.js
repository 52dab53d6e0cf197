// The sharp side of benchmarks/web_image_vs_sharp.py (sharp 0.34, installed at run time
// into build/bench-sharp/, never committed). One job per call, on one thread:
//   node web_image.js job INPUT OUTDIR        web-image@1's starting settings, prints CPU ms
//   node web_image.js sweep INPUT OUTDIR BOX FORMAT Q,Q,...   one variant over qualities
//   node web_image.js png INPUT OUTDIR        the decoded, rotated picture as a PNG
const path = require('path');
const sharp = require(process.env.SHARP_MODULE || 'sharp');
sharp.concurrency(1);
sharp.cache(false);

const VARIANTS = [
  {name: 'thumb', box: 320, format: 'webp', quality: 72},
  {name: 'card', box: 800, format: 'webp', quality: 78},
  {name: 'full', box: 1600, format: 'avif', quality: 50},
];

function variant(input, box, format, quality) {
  const p = sharp(input).rotate().resize(box, box, {fit: 'inside', withoutEnlargement: true});
  return format === 'avif' ? p.avif({quality, effort: 4}) : p.webp({quality});
}

async function main() {
  const [mode, input, out, ...rest] = process.argv.slice(2);
  const start = process.cpuUsage();
  const results = [];
  if (mode === 'job') {
    // As sharp's documentation makes several outputs: one input, a clone per output.
    const base = sharp(input).rotate();
    for (const v of VARIANTS) {
      let p = base.clone().resize(v.box, v.box, {fit: 'inside', withoutEnlargement: true});
      p = v.format === 'avif' ? p.avif({quality: v.quality, effort: 4}) : p.webp({quality: v.quality});
      const info = await p.toFile(path.join(out, `${v.name}.${v.format}`));
      results.push({name: v.name, quality: v.quality, bytes: info.size, width: info.width, height: info.height});
    }
  } else if (mode === 'sweep') {
    const [box, format, qualities] = rest;
    for (const q of qualities.split(',').map(Number)) {
      const file = path.join(out, `${box}-${format}-${q}.${format}`);
      const info = await variant(input, Number(box), format, q).toFile(file);
      results.push({quality: q, bytes: info.size, width: info.width, height: info.height, file});
    }
  } else if (mode === 'png') {
    await sharp(input).rotate().png().toFile(path.join(out, 'decoded.png'));
  }
  const cpu = process.cpuUsage(start);
  console.log(JSON.stringify({cpu_ms: (cpu.user + cpu.system) / 1000, results}));
}

main().catch((err) => { console.error(err.message); process.exit(1); });
