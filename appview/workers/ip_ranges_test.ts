import assert from "node:assert/strict";
import { classifyAddress, parseIpv6 } from "./ip_ranges.ts";

// Issue 9: outbound fetches refuse private, loopback and link-local addresses.
const CASES: [string, string | null | undefined][] = [
  ["0.0.0.0", "unspecified"],
  ["127.0.0.1", "loopback"],
  ["127.255.0.9", "loopback"],
  ["10.1.2.3", "private"],
  ["172.16.0.1", "private"],
  ["172.31.255.255", "private"],
  ["172.32.0.1", null],
  ["192.168.0.10", "private"],
  ["169.254.169.254", "link-local"],
  ["100.64.0.1", "shared"],
  ["224.0.0.1", "multicast"],
  ["255.255.255.255", "reserved"],
  ["8.8.8.8", null],
  ["93.184.215.14", null],
  ["::", "unspecified"],
  ["::1", "loopback"],
  ["[::1]", "loopback"],
  ["fc00::1", "unique-local"],
  ["fd12:3456:789a::1", "unique-local"],
  ["fe80::1%eth0", "link-local"],
  ["febf::1", "link-local"],
  ["::ffff:127.0.0.1", "mapped"],
  ["::ffff:8.8.8.8", "mapped"],
  ["::ffff:7f00:1", "mapped"],
  ["::127.0.0.1", "mapped"],
  ["64:ff9b::10.0.0.1", "private"],
  ["64:ff9b::8.8.8.8", null],
  ["2002:c0a8:0101::1", "private"],
  ["ff02::1", "multicast"],
  ["2606:4700:4700::1111", null],
  ["2001:db8:0:0:0:0:0:1", null],
  ["example.com", undefined],
  ["1.2.3", undefined],
  ["256.1.1.1", undefined],
  ["1:2:3:4:5:6:7:8:9", undefined],
  ["1::2::3", undefined],
];

for (const [input, expected] of CASES) {
  Deno.test(`classifyAddress(${input}) is ${expected}`, () => {
    assert.equal(classifyAddress(input), expected);
  });
}

Deno.test("parseIpv6 expands compression and an IPv4 tail", () => {
  assert.deepEqual(
    Array.from(parseIpv6("::ffff:192.168.1.2")!),
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 2],
  );
  assert.deepEqual(
    Array.from(parseIpv6("2001:db8::1")!),
    [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
  );
});
