//! TLS for a cluster whose user gave no certificates: its authority is derived from the
//! cluster token, so every process that holds the token can make it, and none that lacks
//! the token can (ADR 0039).
//!
//! Each process signs a certificate of its own in memory, with a key made at start that
//! never leaves it. Names are not checked: holding a certificate of the authority takes the
//! token, and the token already lets its holder do anything in the cluster, so a name would
//! add nothing; and the addresses peers dial (a Kubernetes service, a load balancer) are not
//! known when the certificate is made.

use super::config::Material;
use crate::Token;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use ring::hkdf;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

/// The one name every certificate of such a cluster carries, and every client checks for.
pub const CLUSTER_NAME: &str = "cluster.oxray";

/// PKCS#8 v1 of an Ed25519 key, up to its 32-byte seed (RFC 8410).
const ED25519_PKCS8_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// The authority's key seed: the token through HKDF, so that knowing the authority's
/// public key or signatures tells nothing of the token.
fn seed(token: &Token) -> [u8; 32] {
    let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"oxray cluster authority v1");
    let key = salt.extract(token.as_str().as_bytes());
    let mut seed = [0u8; 32];
    key.expand(&[b"ed25519 seed"], hkdf::HKDF_SHA256)
        .and_then(|okm| okm.fill(&mut seed))
        .expect("32 bytes is HKDF-SHA256's own length");
    seed
}

fn authority_key(token: &Token) -> Result<KeyPair, rcgen::Error> {
    let mut pkcs8 = ED25519_PKCS8_PREFIX.to_vec();
    pkcs8.extend_from_slice(&seed(token));
    KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(pkcs8), &rcgen::PKCS_ED25519)
}

fn named(common_name: String) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "oxray");
    name.push(DnType::CommonName, common_name);
    name
}

/// Fixed validity: the same everywhere and whatever the clock says, so that machines whose
/// clocks disagree still agree on the certificates.
fn valid_always(params: &mut CertificateParams) {
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2125, 1, 1);
}

/// The authority's certificate: the same bytes on every machine, since Ed25519 signatures
/// are deterministic.
fn authority(key: &KeyPair) -> Result<rcgen::Certificate, rcgen::Error> {
    let fingerprint = hex::encode(&ring::digest::digest(&ring::digest::SHA256, key.public_key_raw()).as_ref()[..6]);
    let mut params = CertificateParams::default();
    params.distinguished_name = named(format!("oxray cluster authority {fingerprint}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&[1]));
    valid_always(&mut params);
    params.self_signed(key)
}

/// This process's setup: a fresh key, certified by the token's authority.
pub(crate) fn material(token: &Token) -> Result<Material, String> {
    let made = || -> Result<_, rcgen::Error> {
        let authority_key = authority_key(token)?;
        let authority = authority(&authority_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![CLUSTER_NAME.to_string()])?;
        params.distinguished_name = named(format!("oxray process {}", std::process::id()));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        valid_always(&mut params);
        let cert = params.signed_by(&key, &authority, &authority_key)?;
        Ok((authority, cert, key))
    };
    let (authority, cert, key) = made().map_err(|e| format!("cannot make this process's certificate: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(authority.der().clone()).map_err(|e| format!("the cluster's authority is not usable: {e}"))?;
    Ok(Material {
        certs: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        roots,
        server_name: Some(ServerName::try_from(CLUSTER_NAME).expect("a DNS name")),
        https: false,
    })
}

#[cfg(test)]
mod tests;
