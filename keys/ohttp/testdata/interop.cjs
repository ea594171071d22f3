// Independent implementation of SparkInfer's encrypted request/response
// framing (docs/PROTOCOL.md) on the npm packages @hpke/core,
// @hpke/hybridkem-x-wing, @hpke/dhkem-x25519 and @hpke/chacha20poly1305 for
// HPKE, and node:crypto for HKDF and the response AEADs. Written from the
// protocol document, not from the Go code. Driven by interop_test.go:
// reads one JSON job on stdin, writes one JSON result on stdout.
//
// Jobs:
//   {"mode":"open", "privateKey", "request", "response"}  -> {"plaintext","secret","response"}
//   {"mode":"seal", "keyConfig", "suite", "plaintext"}    -> {"request","secret","enc"}
//   {"mode":"open-response", "suite", "secret", "enc", "response"} -> {"response"}
//   {"mode":"seal-response", "suite", "secret", "enc", "nonce", "chunks"} -> {"response"}
// Byte strings are hex. The npm directory comes from $SPARKINFER_NPM_DIR.
"use strict";

const path = require("node:path");
const nodeCrypto = require("node:crypto");
const { createRequire } = require("node:module");

const npmRequire = createRequire(path.join(process.env.SPARKINFER_NPM_DIR, "package.json"));
const { CipherSuite, HkdfSha256, Aes128Gcm } = npmRequire("@hpke/core");
const { XWing } = npmRequire("@hpke/hybridkem-x-wing");
const { DhkemX25519HkdfSha256 } = npmRequire("@hpke/dhkem-x25519");
const { Chacha20Poly1305 } = npmRequire("@hpke/chacha20poly1305");

const LABEL_REQUEST = "sparkinfer request v1";
const LABEL_RESPONSE = "sparkinfer response v1";

const KEMS = {
  0x647a: { make: () => new XWing(), nenc: 1120, npk: 1216 },
  0x0020: { make: () => new DhkemX25519HkdfSha256(), nenc: 32, npk: 32 },
};
const AEADS = {
  0x0001: { make: () => new Aes128Gcm(), nk: 16, nn: 12, node: "aes-128-gcm" },
  0x0003: { make: () => new Chacha20Poly1305(), nk: 32, nn: 12, node: "chacha20-poly1305" },
};

const hex = (b) => Buffer.from(b).toString("hex");
const unhex = (s) => new Uint8Array(Buffer.from(s, "hex"));
const u16 = (b, o) => (b[o] << 8) | b[o + 1];
const u32 = (b, o) => ((b[o] << 24) >>> 0) + (b[o + 1] << 16) + (b[o + 2] << 8) + b[o + 3];
const concat = (...parts) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
};

function cipherSuite(kemId, kdfId, aeadId) {
  if (!KEMS[kemId] || kdfId !== 0x0001 || !AEADS[aeadId]) throw new Error(`unsupported suite ${kemId}/${kdfId}/${aeadId}`);
  return new CipherSuite({ kem: KEMS[kemId].make(), kdf: new HkdfSha256(), aead: AEADS[aeadId].make() });
}

function requestInfo(header) {
  return concat(new TextEncoder().encode(LABEL_REQUEST), new Uint8Array([0]), header);
}

// Key config (RFC 9458 section 3.1): key id, kem id, public key, algorithms.
function parseKeyConfig(b) {
  const kemId = u16(b, 1);
  const kem = KEMS[kemId];
  if (!kem) throw new Error("unknown kem");
  const pk = b.slice(3, 3 + kem.npk);
  const n = u16(b, 3 + kem.npk);
  const algs = [];
  for (let o = 5 + kem.npk; o < 5 + kem.npk + n; o += 4) algs.push([u16(b, o), u16(b, o + 2)]);
  if (5 + kem.npk + n !== b.length) throw new Error("trailing bytes in key config");
  return { keyId: b[0], kemId, pk, algs };
}

function responseKey(aeadId, secret, enc, nonce) {
  const a = AEADS[aeadId];
  const salt = concat(enc, nonce);
  // HKDF-Expand(HKDF-Extract(salt, secret), info, L), once per output.
  const key = Buffer.from(nodeCrypto.hkdfSync("sha256", secret, salt, "key", a.nk));
  const base = Buffer.from(nodeCrypto.hkdfSync("sha256", secret, salt, "nonce", a.nn));
  return { key, base };
}

function openResponse(aeadId, secret, enc, resp) {
  const a = AEADS[aeadId];
  const nlen = Math.max(a.nk, a.nn);
  const { key, base } = responseKey(aeadId, secret, enc, resp.slice(0, nlen));
  const chunks = [];
  let o = nlen;
  for (let i = 0; ; i++) {
    if (o + 5 > resp.length) throw new Error("truncated");
    const flags = resp[o];
    const len = u32(resp, o + 1);
    const sealed = resp.slice(o + 5, o + 5 + len);
    o += 5 + len;
    const nonce = Buffer.from(base);
    for (let k = 0; k < 8; k++) nonce[nonce.length - 1 - k] ^= Number((BigInt(i) >> BigInt(8 * k)) & 0xffn);
    const d = nodeCrypto.createDecipheriv(a.node, key, nonce, { authTagLength: 16 });
    d.setAAD(flags === 1 ? Buffer.from("final") : Buffer.alloc(0));
    d.setAuthTag(sealed.slice(sealed.length - 16));
    chunks.push(Buffer.concat([d.update(sealed.slice(0, sealed.length - 16)), d.final()]));
    if (flags === 1) {
      if (o !== resp.length) throw new Error("data after final chunk");
      return Buffer.concat(chunks);
    }
  }
}

function sealResponse(aeadId, secret, enc, respNonce, chunks) {
  const a = AEADS[aeadId];
  const { key, base } = responseKey(aeadId, secret, enc, respNonce);
  const parts = [Buffer.from(respNonce)];
  chunks.forEach((c, i) => {
    const final = i === chunks.length - 1;
    const nonce = Buffer.from(base);
    for (let k = 0; k < 8; k++) nonce[nonce.length - 1 - k] ^= Number((BigInt(i) >> BigInt(8 * k)) & 0xffn);
    const e = nodeCrypto.createCipheriv(a.node, key, nonce, { authTagLength: 16 });
    e.setAAD(final ? Buffer.from("final") : Buffer.alloc(0));
    const sealed = Buffer.concat([e.update(Buffer.from(c, "hex")), e.final(), e.getAuthTag()]);
    const hdr = Buffer.alloc(5);
    hdr[0] = final ? 1 : 0;
    hdr.writeUInt32BE(sealed.length, 1);
    parts.push(hdr, sealed);
  });
  return Buffer.concat(parts);
}

async function open(job) {
  const req = unhex(job.request);
  const hdr = req.slice(0, 7);
  const kemId = u16(hdr, 1), kdfId = u16(hdr, 3), aeadId = u16(hdr, 5);
  const suite = cipherSuite(kemId, kdfId, aeadId);
  const nenc = KEMS[kemId].nenc;
  const enc = req.slice(7, 7 + nenc);
  const sk = await suite.kem.deserializePrivateKey(unhex(job.privateKey).buffer);
  const rc = await suite.createRecipientContext({ recipientKey: sk, enc: enc.buffer.slice(enc.byteOffset, enc.byteOffset + enc.length), info: requestInfo(hdr) });
  const pt = new Uint8Array(await rc.open(req.slice(7 + nenc)));
  const nsec = Math.max(AEADS[aeadId].nk, AEADS[aeadId].nn);
  const secret = new Uint8Array(await rc.export(new TextEncoder().encode(LABEL_RESPONSE), nsec));
  const out = { plaintext: hex(pt), secret: hex(secret) };
  if (job.response) out.response = hex(openResponse(aeadId, secret, enc, unhex(job.response)));
  return out;
}

async function seal(job) {
  const cfg = parseKeyConfig(unhex(job.keyConfig));
  const [kdfId, aeadId] = [job.suite.kdf, job.suite.aead];
  if (!cfg.algs.some(([k, a]) => k === kdfId && a === aeadId)) throw new Error("suite not offered");
  const suite = cipherSuite(cfg.kemId, kdfId, aeadId);
  const hdr = new Uint8Array([cfg.keyId, cfg.kemId >> 8, cfg.kemId & 255, kdfId >> 8, kdfId & 255, aeadId >> 8, aeadId & 255]);
  const pk = await suite.kem.deserializePublicKey(cfg.pk.buffer.slice(cfg.pk.byteOffset, cfg.pk.byteOffset + cfg.pk.length));
  const sc = await suite.createSenderContext({ recipientPublicKey: pk, info: requestInfo(hdr) });
  const ct = new Uint8Array(await sc.seal(unhex(job.plaintext)));
  const enc = new Uint8Array(sc.enc);
  const nsec = Math.max(AEADS[aeadId].nk, AEADS[aeadId].nn);
  const secret = new Uint8Array(await sc.export(new TextEncoder().encode(LABEL_RESPONSE), nsec));
  return { request: hex(concat(hdr, enc, ct)), secret: hex(secret), enc: hex(enc) };
}

async function main() {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const job = JSON.parse(input);
  let out;
  switch (job.mode) {
    case "open": out = await open(job); break;
    case "seal": out = await seal(job); break;
    case "open-response":
      out = { response: hex(openResponse(job.suite.aead, unhex(job.secret), unhex(job.enc), unhex(job.response))) };
      break;
    case "seal-response":
      out = { response: hex(sealResponse(job.suite.aead, unhex(job.secret), unhex(job.enc), unhex(job.nonce), job.chunks)) };
      break;
    default: throw new Error("unknown mode " + job.mode);
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => { process.stderr.write(String(e && e.stack || e) + "\n"); process.exit(1); });
