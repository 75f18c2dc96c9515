// The hash slot of a key (CRC16 of its hash tag, mod 16384), from the package ioredis itself uses.
declare module "cluster-key-slot" {
  const generate: (key: string) => number
  export default generate
}
