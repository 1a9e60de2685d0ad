#!/usr/bin/env bash
# Makes the TLS material the manifests mount, with openssl: a CA, the coordinator's server
# certificate and one client certificate for the training pods and troikactl (mutual TLS).
#
#   deploy/make-tls-secrets.sh DIR            # writes DIR/coordinator/ and DIR/client/
#   deploy/make-tls-secrets.sh DIR --apply    # and creates the two Secrets in namespace troika
#
# DIR/coordinator/{tls.crt,tls.key,ca.crt} is Secret troika-coordinator-tls, DIR/client/{...}
# is Secret troika-client-tls — the files the pods see under /etc/troika/tls. Keep DIR/ca.key
# offline: it signs every new client. Certificates are valid for 365 days (TROIKA_TLS_DAYS).
# The server certificate names the Service (troika-coordinator, .troika, .troika.svc,
# .troika.svc.cluster.local), localhost and 127.0.0.1 (port-forwards).
set -euo pipefail
dir=${1:?usage: make-tls-secrets.sh DIR [--apply]}
days=${TROIKA_TLS_DAYS:-365}
mkdir -p "$dir/coordinator" "$dir/client"
cd "$dir"
key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${key[@]}" -keyout ca.key -out ca.crt -days "$days" -subj /CN=troika-ca 2>/dev/null
san="subjectAltName=DNS:troika-coordinator,DNS:troika-coordinator.troika"
san+=",DNS:troika-coordinator.troika.svc,DNS:troika-coordinator.troika.svc.cluster.local"
san+=",DNS:localhost,IP:127.0.0.1"
sign() {  # name subject extensions
  openssl req "${key[@]}" -keyout "$1/tls.key" -out "$1/tls.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$3" > "$1/ext"
  openssl x509 -req -in "$1/tls.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
    -out "$1/tls.crt" -extfile "$1/ext" 2>/dev/null
  rm "$1/tls.csr" "$1/ext"
  cp ca.crt "$1/ca.crt"
}
sign coordinator troika-coordinator "$san
extendedKeyUsage=serverAuth"
sign client troika-client "extendedKeyUsage=clientAuth"
echo "TLS material in $dir (coordinator/, client/; ca.key signs new clients)"
if [[ ${2:-} == --apply ]]; then
  for who in coordinator client; do
    kubectl -n troika create secret generic "troika-$who-tls" --from-file="$who/tls.crt" \
      --from-file="$who/tls.key" --from-file="$who/ca.crt"
  done
fi
