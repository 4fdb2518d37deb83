/**
 * The service's version, reported by the account host's `GET /xrpc/_health` (as the reference
 * host reports its own). One constant for the whole checkout: change it when cutting a release.
 *
 * @module
 */

/** Semantic version of this checkout (`major.minor.patch`). */
export const SERVICE_VERSION = "0.1.0";
