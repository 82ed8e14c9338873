//! Public keys out of X.509 certificates and SubjectPublicKeyInfos, and PEM armour off either:
//! what *ring* needs is the raw key (an RSA `RSAPublicKey`, an EC point, an ed25519 key), which
//! lives in the SPKI's bit string.
//!
//! The DER is read by RustCrypto's `x509-cert` (certificates) and `spki` (SubjectPublicKeyInfo),
//! on their `der` crate, which refuses what is not DER (indefinite or non-minimal lengths,
//! trailing bytes, truncation). The PEM armour is taken off here, leniently: any label, text
//! around the block, lines of any length, any whitespace. `der`'s `pem` feature reads RFC 7468's
//! strict grammar (64-character lines), which keys pasted on one line would fail.

use x509_cert::Certificate;
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::der::{Decode as _, Encode as _};
use x509_cert::spki::SubjectPublicKeyInfoRef;

/// A public key as *ring* takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpkiKey<'a> {
    /// The DER `RSAPublicKey` (PKCS#1).
    Rsa(&'a [u8]),
    /// The uncompressed P-256 point (`04 || x || y`).
    P256(&'a [u8]),
}

/// 1.2.840.113549.1.1.1 (rsaEncryption).
const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
/// 1.2.840.10045.2.1 (id-ecPublicKey).
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
/// 1.2.840.10045.3.1.7 (prime256v1, P-256).
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");

/// The SubjectPublicKeyInfo (its whole DER) of an X.509 certificate.
///
/// The certificate is decoded whole (`x509-cert`); the SPKI is its own DER again, byte for byte
/// what the certificate holds (DER has one encoding of a value).
pub(crate) fn certificate_spki(cert: &[u8]) -> Option<Vec<u8>> {
    let cert = Certificate::from_der(cert).ok()?;
    cert.tbs_certificate.subject_public_key_info.to_der().ok()
}

/// The key inside a SubjectPublicKeyInfo: RSA, or EC on P-256.
///
/// # Errors
/// A short reason: not an SPKI, or a key of another kind.
pub(crate) fn spki_key(spki: &[u8]) -> Result<SpkiKey<'_>, &'static str> {
    const NOT_SPKI: &str = "not a DER SubjectPublicKeyInfo";
    let info = SubjectPublicKeyInfoRef::from_der(spki).map_err(|_| NOT_SPKI)?;
    // A key is whole bytes: a bit string with unused bits is not one.
    let key = match info.subject_public_key.as_bytes() {
        Some(key) if !key.is_empty() => key,
        _ => return Err(NOT_SPKI),
    };
    let algorithm = info.algorithm;
    if algorithm.oid == RSA_ENCRYPTION {
        Ok(SpkiKey::Rsa(key))
    } else if algorithm.oid == EC_PUBLIC_KEY {
        match algorithm.parameters_oid() {
            Ok(curve) if curve == P256 => Ok(SpkiKey::P256(key)),
            _ => Err("an EC key on a curve other than P-256"),
        }
    } else {
        Err("a key that is neither RSA nor EC")
    }
}

/// The DER inside the first PEM block labelled `label` (`CERTIFICATE`, `PUBLIC KEY`).
pub(crate) fn pem(text: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let base64: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    crate::util::base64_decode(&base64)
}

/// Key material as configured: base64 DER, or the same in PEM armour of any label.
pub(crate) fn base64_or_pem(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.starts_with("-----BEGIN ") {
        let label = text.strip_prefix("-----BEGIN ")?.split_once("-----")?.0;
        return pem(text, label);
    }
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    crate::util::base64_decode(&compact)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQUENCE: u8 = 0x30;

    /// SendGrid's documented example verification key (P-256).
    const SENDGRID_DOC_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA==";

    #[test]
    fn an_ec_spki_gives_its_point() {
        let der = base64_or_pem(SENDGRID_DOC_KEY).unwrap();
        let SpkiKey::P256(point) = spki_key(&der).unwrap() else {
            panic!("not P-256");
        };
        assert_eq!((point.len(), point[0]), (65, 0x04));
    }

    #[test]
    fn a_certificates_rsa_key_is_found() {
        let pem = include_str!("../tests/fixtures/sns/signing-cert.pem");
        let cert = super::pem(pem, "CERTIFICATE").unwrap();
        let spki = certificate_spki(&cert).unwrap();
        let SpkiKey::Rsa(key) = spki_key(&spki).unwrap() else {
            panic!("not RSA");
        };
        // RSAPublicKey ::= SEQUENCE { modulus, publicExponent }: a 2048-bit modulus.
        assert_eq!(key[0], SEQUENCE);
        assert!(key.len() > 256, "{}", key.len());
        // The SPKI is the certificate's own bytes, and so the key ring is given.
        assert!(cert.windows(spki.len()).any(|w| w == spki.as_slice()));
    }

    #[test]
    fn pem_armour_and_line_breaks_are_taken_off() {
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n{}\n-----END PUBLIC KEY-----\n",
            &SENDGRID_DOC_KEY[..64],
            &SENDGRID_DOC_KEY[64..]
        );
        assert_eq!(base64_or_pem(&pem), base64_or_pem(SENDGRID_DOC_KEY));
    }

    #[test]
    fn truncated_and_foreign_der_is_refused_without_panicking() {
        let der = base64_or_pem(SENDGRID_DOC_KEY).unwrap();
        for cut in 0..der.len() {
            assert!(spki_key(&der[..cut]).is_err(), "{cut}");
            assert!(certificate_spki(&der[..cut]).is_none(), "{cut}");
        }
        // An SPKI is not a certificate.
        assert!(certificate_spki(&der).is_none());
        // Lengths that claim more than is there, or use five bytes; a high tag number.
        for bad in [
            &[0x30, 0x85, 0, 0, 0, 0, 1][..],
            &[0x30, 0x82, 0xff, 0xff, 0],
            &[0x1f, 0x00],
        ] {
            assert_eq!(
                spki_key(bad),
                Err("not a DER SubjectPublicKeyInfo"),
                "{bad:02x?}"
            );
            assert!(certificate_spki(bad).is_none(), "{bad:02x?}");
        }
    }

    #[test]
    fn keys_of_other_kinds_are_named() {
        let der = base64_or_pem(SENDGRID_DOC_KEY).unwrap();
        let oid = |dotted| ObjectIdentifier::new_unwrap(dotted).as_bytes().to_vec();
        let swap = |from: Vec<u8>, to: Vec<u8>| {
            assert_eq!(from.len(), to.len());
            let at = der.windows(from.len()).position(|w| w == from).unwrap();
            let mut out = der.clone();
            out[at..at + to.len()].copy_from_slice(&to);
            out
        };
        // Same-length OIDs, so that the DER around them stays good: prime192v1 is not P-256, and
        // 1.2.840.10045.2.2 is not id-ecPublicKey.
        let on_p192 = swap(oid("1.2.840.10045.3.1.7"), oid("1.2.840.10045.3.1.1"));
        assert_eq!(
            spki_key(&on_p192),
            Err("an EC key on a curve other than P-256")
        );
        let not_ec = swap(oid("1.2.840.10045.2.1"), oid("1.2.840.10045.2.2"));
        assert_eq!(spki_key(&not_ec), Err("a key that is neither RSA nor EC"));
        // Unused bits in the key's bit string: not a key.
        let mut odd_bits = der.clone();
        let bits_at = der.len() - 66;
        assert_eq!(der[bits_at], 0);
        odd_bits[bits_at] = 1;
        assert_eq!(spki_key(&odd_bits), Err("not a DER SubjectPublicKeyInfo"));
        // Bytes after the SPKI: not DER.
        let mut trailing = der.clone();
        trailing.push(0);
        assert_eq!(spki_key(&trailing), Err("not a DER SubjectPublicKeyInfo"));
    }
}
