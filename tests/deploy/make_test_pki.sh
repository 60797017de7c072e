#!/usr/bin/env bash
# Writes a throw-away PKI for the TLS tests into DIR (never committed; made fresh per test run):
#   ca.pem                 a test CA (its key is deleted once it has signed)
#   server.pem server.key  a server certificate for 127.0.0.1 and localhost, signed by the CA
#   other.key              a key that belongs to no certificate (key/cert mismatch tests)
#   encrypted.key          server.key under a passphrase (a service cannot type one)
#
# usage: tests/deploy/make_test_pki.sh DIR
set -euo pipefail
DIR=$1
mkdir -p "$DIR"
cd "$DIR"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=kvferry test CA" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
  -keyout server.key -out server.csr 2>/dev/null
cat >server.ext <<'EXT'
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
authorityKeyIdentifier=keyid,issuer
EXT
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.pem 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out other.key 2>/dev/null
openssl pkey -in server.key -aes256 -passout pass:kvferry-test -out encrypted.key
rm -f ca.key ca.srl server.csr server.ext
chmod 0644 ca.pem server.pem
