# The echo service of Lanner's pingpong and throughput workloads, for capnp-rpc.
@0xc4d6a1e3b2f59a17;

interface Echo {
  # Returns the payload it was given.
  echo @0 (data :Data) -> (data :Data);
}
