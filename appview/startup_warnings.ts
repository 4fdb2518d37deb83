/**
 * Startup warnings of the index for its relaxed security settings (spec 5.3): one warning per
 * active setting, logged once by the index's startup.
 *
 * @module
 */

import type { Logger } from "../shared/log.ts";
import type { AppviewConfig } from "./config.ts";

/** Warning logged when `APPVIEW_AUTH_REQUIRED` is false. */
export const WARN_AUTH_OFF =
  "APPVIEW_AUTH_REQUIRED is false: private endpoints serve any caller for any did";
/** Warning logged when `APPVIEW_CORS_ORIGINS` is unset. */
export const WARN_CORS_UNSET =
  "APPVIEW_CORS_ORIGINS is unset: responses carry Access-Control-Allow-Origin: *";
/** Warning logged when `APPVIEW_INGEST_SECRET` is unset. */
export const WARN_INGEST_SECRET_UNSET =
  "APPVIEW_INGEST_SECRET is unset: /internal/ingest-commit accepts unauthenticated writes";

/**
 * Logs exactly one warning for each relaxed setting that is active and returns the messages
 * logged (empty when every setting is strict). Call it once, at startup.
 */
export function warnRelaxedSettings(
  config: Pick<AppviewConfig, "authRequired" | "corsOrigins" | "ingestSecret">,
  log: Logger,
): string[] {
  const warnings: string[] = [];
  if (!config.authRequired) warnings.push(WARN_AUTH_OFF);
  if (config.corsOrigins === null) warnings.push(WARN_CORS_UNSET);
  if (config.ingestSecret === null) warnings.push(WARN_INGEST_SECRET_UNSET);
  for (const warning of warnings) log.warn(warning);
  return warnings;
}
