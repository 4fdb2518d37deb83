# Runs one component by argument: `docker run IMAGE pds`, `... appview` or `... dev` (default).
# Data lives in /app/data (mount a volume there and back it up). Task permissions limit writes
# to ./data, so the image keeps the default DATA_DIR.
FROM denoland/deno:2.9.6

WORKDIR /app
COPY deno.json deno.lock ./
COPY shared/ shared/
COPY runtime/ runtime/
COPY pds/ pds/
COPY appview/ appview/
COPY scripts/ scripts/
COPY web/ web/
RUN deno install --frozen && deno task web:build

ENV PDS_HOSTNAME=0.0.0.0 \
    APPVIEW_HOSTNAME=0.0.0.0
# The server tasks build the web app again before they start (`dev`, `appview`): its output
# folder belongs to the user they run as.
RUN mkdir -p /app/data && chown deno:deno /app/data && chown -R deno:deno /app/web/dist
VOLUME ["/app/data"]
EXPOSE 2583 3000
# The task running as process 1 picks what is asked: `pds` /xrpc/_health, `appview` /healthz (503
# when a stream consumer failed or stalled, APPVIEW_HEALTH_STALL_SECONDS), `dev` both; the
# consumer and handle-sync tasks serve no HTTP. The image has no curl: a small script does it.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD ["deno", "run", "--quiet", "--no-config", "--allow-net", "--allow-env=PDS_HOSTNAME,PDS_PORT,APPVIEW_HOSTNAME,APPVIEW_PORT", "--allow-read=/proc/1/cmdline", "scripts/healthcheck.ts"]
USER deno
ENTRYPOINT ["deno", "task"]
CMD ["dev"]
