#!/usr/bin/env bash
# Makes the secrets the manifests mount (docs/security.md), with openssl: a CA, the
# coordinator's server certificate and one client certificate for the training pods and
# troikactl (mutual TLS), the coordinator's admin token and the example jobs' tokens.
#
#   deploy/make-secrets.sh DIR            # writes DIR/coordinator/, client/, admin/, example-job/,
#                                         # example-elastic-job/
#   deploy/make-secrets.sh DIR --apply    # and creates the Secrets in namespace troika
#
# Secret (files)                                   directory         mounted at
#   troika-coordinator-tls (tls.crt tls.key ca.crt)  DIR/coordinator/  /etc/troika/tls
#   troika-client-tls      (tls.crt tls.key ca.crt)  DIR/client/       /etc/troika/tls
#   troika-admin-token     (token)                   DIR/admin/        /etc/troika/admin
#   troika-example-token   (token)                   DIR/example-job/  /etc/troika/job
#   troika-example-elastic-token (token)   DIR/example-elastic-job/  /etc/troika/job
# Keep DIR/ca.key offline: it signs every new client. Certificates are valid for 365 days
# (TROIKA_TLS_DAYS). Each job of your own gets a token of its own: `openssl rand -hex 32`.
# The server certificate names the Service (troika-coordinator, .troika, .troika.svc,
# .troika.svc.cluster.local), localhost and 127.0.0.1 (port-forwards).
set -euo pipefail
dir=${1:?usage: make-secrets.sh DIR [--apply]}
days=${TROIKA_TLS_DAYS:-365}
mkdir -p "$dir/coordinator" "$dir/client" "$dir/admin" "$dir/example-job" "$dir/example-elastic-job"
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
(
  umask 077
  for who in admin example-job example-elastic-job; do openssl rand -hex 32 > "$who/token"; done
)
echo "secrets in $dir (coordinator/, client/, admin/, example-job/, example-elastic-job/;" \
  "ca.key signs new clients)"
if [[ ${2:-} == --apply ]]; then
  for who in coordinator client; do
    kubectl -n troika create secret generic "troika-$who-tls" --from-file="$who/tls.crt" \
      --from-file="$who/tls.key" --from-file="$who/ca.crt"
  done
  kubectl -n troika create secret generic troika-admin-token --from-file=admin/token
  kubectl -n troika create secret generic troika-example-token --from-file=example-job/token
  kubectl -n troika create secret generic troika-example-elastic-token \
    --from-file=example-elastic-job/token
fi
