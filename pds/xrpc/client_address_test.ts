// The key per-client limits count an address under (issue 36 item 3): an IPv6 /64 is one client.

import assert from "node:assert/strict";
import { clientKey } from "./client_address.ts";

Deno.test("clientKey: IPv4 as is, IPv6 as its /64, IPv4-mapped IPv6 as IPv4", () => {
  const cases: [string, string][] = [
    ["203.0.113.7", "203.0.113.7"],
    ["unknown", "unknown"],
    ["2001:db8:1:2::5", "2001:db8:1:2::/64"],
    ["2001:0db8:0001:0002:ffff:ffff:ffff:0001", "2001:db8:1:2::/64"],
    ["2001:DB8:1:2:0:0:0:9", "2001:db8:1:2::/64"],
    ["2001:db8::", "2001:db8:0:0::/64"],
    ["::1", "0:0:0:0::/64"],
    ["::", "0:0:0:0::/64"],
    ["fe80::1:2:3:4", "fe80:0:0:0::/64"],
    ["fe80::1%eth0", "fe80:0:0:0::/64"],
    ["::ffff:198.51.100.4", "198.51.100.4"],
    ["::ffff:c633:6404", "198.51.100.4"],
    ["64:ff9b::1.2.3.4", "64:ff9b:0:0::/64"],
    // Not an IPv6 address: kept whole.
    ["1:2:3", "1:2:3"],
    ["1::2::3", "1::2::3"],
    ["::ffff:1.2.3.400", "::ffff:1.2.3.400"],
    ["1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7:8:9"],
  ];
  for (const [address, key] of cases) assert.equal(clientKey(address), key, address);
});
