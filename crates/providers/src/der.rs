//! Just enough DER to take a public key out of an X.509 certificate or a SubjectPublicKeyInfo,
//! and PEM armour off either: what *ring* needs is the raw key (an RSA `RSAPublicKey`, an EC
//! point, an ed25519 key), which lives in the SPKI's bit string.
//!
//! Only definite lengths up to four bytes and single-byte tags are read: DER allows nothing else
//! in these structures.

/// A public key as *ring* takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpkiKey<'a> {
    /// The DER `RSAPublicKey` (PKCS#1).
    Rsa(&'a [u8]),
    /// The uncompressed P-256 point (`04 || x || y`).
    P256(&'a [u8]),
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OID: u8 = 0x06;
/// `[0] EXPLICIT`: the certificate's version.
const VERSION: u8 = 0xa0;

/// 1.2.840.113549.1.1.1 (rsaEncryption).
const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
/// 1.2.840.10045.2.1 (id-ecPublicKey).
const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// 1.2.840.10045.3.1.7 (prime256v1, P-256).
const P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// One DER element.
struct Element<'a> {
    tag: u8,
    content: &'a [u8],
    /// The element's bytes, tag and length included.
    whole: &'a [u8],
    /// What follows it.
    rest: &'a [u8],
}

/// The first element of `input`.
fn element(input: &[u8]) -> Option<Element<'_>> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // high tag numbers: not in these structures
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None; // indefinite, or absurdly long
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (content, after) = rest.split_at(len);
    let whole = &input[..input.len() - after.len()];
    Some(Element {
        tag,
        content,
        whole,
        rest: after,
    })
}

/// The content of an element with tag `tag`, and what follows.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let e = element(input)?;
    (e.tag == tag).then_some((e.content, e.rest))
}

/// The SubjectPublicKeyInfo (its whole DER) of an X.509 certificate.
///
/// `Certificate ::= SEQUENCE { tbsCertificate, .. }`, `TBSCertificate ::= SEQUENCE { [0] version
/// OPTIONAL, serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, .. }`.
pub(crate) fn certificate_spki(cert: &[u8]) -> Option<&[u8]> {
    let (certificate, _) = expect(cert, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.rest;
    }
    let (_serial, rest) = expect(rest, INTEGER)?;
    // signature algorithm, issuer, validity, subject
    let mut rest = rest;
    for _ in 0..4 {
        rest = expect(rest, SEQUENCE)?.1;
    }
    let spki = element(rest)?;
    (spki.tag == SEQUENCE).then_some(spki.whole)
}

/// The key inside a SubjectPublicKeyInfo: RSA, or EC on P-256.
///
/// # Errors
/// A short reason: not an SPKI, or a key of another kind.
pub(crate) fn spki_key(spki: &[u8]) -> Result<SpkiKey<'_>, &'static str> {
    const NOT_SPKI: &str = "not a DER SubjectPublicKeyInfo";
    let (info, _) = expect(spki, SEQUENCE).ok_or(NOT_SPKI)?;
    let (algorithm, rest) = expect(info, SEQUENCE).ok_or(NOT_SPKI)?;
    let (bits, _) = expect(rest, BIT_STRING).ok_or(NOT_SPKI)?;
    // The first byte of a bit string counts its unused bits: a key has none.
    let key = match bits.split_first() {
        Some((0, key)) if !key.is_empty() => key,
        _ => return Err(NOT_SPKI),
    };
    let (oid, params) = expect(algorithm, OID).ok_or(NOT_SPKI)?;
    if oid == RSA_ENCRYPTION {
        Ok(SpkiKey::Rsa(key))
    } else if oid == EC_PUBLIC_KEY {
        match expect(params, OID) {
            Some((curve, _)) if curve == P256 => Ok(SpkiKey::P256(key)),
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
        let SpkiKey::Rsa(key) = spki_key(spki).unwrap() else {
            panic!("not RSA");
        };
        // RSAPublicKey ::= SEQUENCE { modulus, publicExponent }: a 2048-bit modulus.
        assert_eq!(key[0], SEQUENCE);
        assert!(key.len() > 256, "{}", key.len());
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
        // Lengths that claim more than is there, or use five bytes.
        assert!(element(&[0x30, 0x85, 0, 0, 0, 0, 1]).is_none());
        assert!(element(&[0x30, 0x82, 0xff, 0xff, 0]).is_none());
        assert!(element(&[0x1f, 0x00]).is_none());
    }
}
