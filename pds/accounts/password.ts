/**
 * Password hashing: scrypt (memory-hard) with a random per-account salt, compared in constant
 * time. The stored form names its parameters, so they can be raised later without breaking old
 * hashes: `scrypt$<N>$<r>$<p>$<salt b64>$<hash b64>`.
 *
 * @module
 */

import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";
import { Buffer } from "node:buffer";

/** Shortest accepted password. */
export const MIN_PASSWORD_LENGTH = 8;
/** Longest accepted password (bounds the hashing work an attacker can ask for). */
export const MAX_PASSWORD_LENGTH = 256;

const PARAMS = { N: 16384, r: 8, p: 1 } as const;
const KEY_LENGTH = 32;
const SALT_LENGTH = 16;
const MAX_MEM = 64 * 1024 * 1024;

/** Hashes `password` with a fresh salt; returns the self-describing stored form. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SALT_LENGTH);
  const hash = await scryptAsync(password, salt, PARAMS);
  return ["scrypt", PARAMS.N, PARAMS.r, PARAMS.p, salt.toString("base64"), hash.toString("base64")]
    .join("$");
}

/** Checks `password` against a stored hash in constant time; false for a malformed hash. */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split("$");
  if (parts.length !== 6 || parts[0] !== "scrypt") return false;
  const [N, r, p] = parts.slice(1, 4).map(Number);
  const salt = Buffer.from(parts[4], "base64");
  const expected = Buffer.from(parts[5], "base64");
  if (![N, r, p].every(Number.isSafeInteger) || expected.length !== KEY_LENGTH) return false;
  const actual = await scryptAsync(password, salt, { N, r, p });
  return timingSafeEqual(actual, expected);
}

/**
 * Hashes an app password of `did` with a salt derived from the DID, so that a login can compute
 * it once and compare it with every app password of the account (as the reference host does);
 * app passwords are 80 random bits, so the fixed salt costs nothing against guessing. Same stored
 * form as {@link hashPassword}.
 */
export async function hashAppPassword(did: string, password: string): Promise<string> {
  const digest = await crypto.subtle.digest(
    "SHA-256",
    new TextEncoder().encode(`app-password:${did}`),
  );
  const salt = Buffer.from(new Uint8Array(digest).subarray(0, SALT_LENGTH));
  const hash = await scryptAsync(password, salt, PARAMS);
  return ["scrypt", PARAMS.N, PARAMS.r, PARAMS.p, salt.toString("base64"), hash.toString("base64")]
    .join("$");
}

/** Compares two stored hashes in constant time (for equal lengths). */
export function isSameHash(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * Spends the same work as a real check, for an unknown identifier, so that response times do not
 * tell which accounts exist.
 */
export async function burnPasswordCheck(password: string): Promise<void> {
  await scryptAsync(password, DUMMY_SALT, PARAMS);
}

const DUMMY_SALT = Buffer.alloc(SALT_LENGTH, 7);

function scryptAsync(
  password: string,
  salt: Buffer,
  params: { N: number; r: number; p: number },
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(
      password.normalize("NFKC"),
      salt,
      KEY_LENGTH,
      { ...params, maxmem: MAX_MEM },
      (err, key) => {
        if (err) reject(err);
        else resolve(key);
      },
    );
  });
}
