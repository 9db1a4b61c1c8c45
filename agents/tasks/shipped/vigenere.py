"""Break a Vigenere cipher: find the key, of unknown length, that encrypted cipher.txt.

An agent-console task file. The console only parses it (with `ast`) and never runs it: the
metadata below must be literals. The imports, constants and functions are the checks; they
run inside the agent's sandbox, where every `check_*` becomes an evaluation callback.
The plaintext and key are kept out of this file: the checks compare SHA-256 hashes.
"""

import hashlib

TITLE = "Break a Vigenere cipher"

PROMPT = """
The file cipher.txt in your work directory holds an English text encrypted with a
Vigenere cipher. Before encryption the text was upper-cased and everything that is not a
letter A-Z (spaces, punctuation, digits) was removed; the ciphertext is one line of
letters A-Z. Encryption used the standard tabula recta with A=0 ... Z=25:
cipher[i] = (plain[i] + key[i mod len(key)]) mod 26. The key is a word of upper-case
letters; its length is unknown.

Find the key and write it to solution.txt: only the key, in upper-case letters, written
once (not repeated), on one line. Decrypting cipher.txt with it must give the readable
English text. Do not change cipher.txt.
"""

MAX_TICKS = 60

FILES = {
    "cipher.txt": "ELQZVGKXSSGGRKHIAIDYRPWENEDSSUOPZKATRVHVJWTWCTKEETMGFEGXSIDCPKVFPPAKUIVXZAQFRAFLPZQBVNJLPGXWZBHHELQBNRUSHWFOVRVXCMYARDWLPAUQXPRPTWTSQTKIRVQOGLHRDEZRJAWGSIPHUEEILQEKRESENVAGFTKIOEDYJAWICWMWYOUWLPABTTKINSMGGSDMOXTOGHLWWMSVGHDHYIHSEOQGPJMWYEGRZXQJRNGYCMZUGHHATRFSESWSCQFVNTWSCIFVRRRSQJDCZTKISEDPBRPEDXQFFHRYDIIVRNSIZTXSNSNIOLUAUOZLPQMBNGHHTXTSBNOCDLDITGHHLRPGNIGXSEFOYAPTTWMGZAOPELUBTBXXLWYOYLWLTRSRBNHIGIDMAIJLEJAFSOUXJCQOESEINSYSFANMYHATCRRQTWQHBSWVLRSSESBSFAUZYNHZPVYSRTRRELQBVGKXSIDSGIUIOXTSJHRPPZUZYAJIHEXYRDRYEEXCAGWLPFDSNKZEEIDQNRUCTRSQNNGPPWMBQFRVZRQVBUUXSITOEBRVRPAKRDEVTKTHRRWLLRTWFTRAPVQJRRKEO\n",
}

# SHA-256 of the key's length (as decimal text) and of the decrypted text (letters A-Z only).
KEY_LENGTH_SHA256 = "2c624232cdd221771294dfbb310aca000a0df6ac8b66b696d90ef06fdefb64a3"
PLAINTEXT_SHA256 = "ef86879a502b5db62871db78d1702695f45d992adb4a23698d9b3a774d9b7d75"


def _sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_key(subagent):
    """The key in solution.txt, upper-cased and stripped; None when there is no file."""
    try:
        text = subagent.read_file("solution.txt")
    except (OSError, ValueError):
        return None
    return text.strip().upper()


def _decrypt(ciphertext, key):
    letters = [c for c in ciphertext.upper() if "A" <= c <= "Z"]
    shifts = [ord(k) - ord("A") for k in key]
    return "".join(
        chr((ord(c) - ord("A") - shifts[i % len(shifts)]) % 26 + ord("A"))
        for i, c in enumerate(letters)
    )


def check_key_file_exists(subagent):
    """solution.txt exists and holds a key: one run of letters A-Z."""
    key = _read_key(subagent)
    return bool(key) and key.isascii() and key.isalpha()


def check_key_length(subagent):
    """The key in solution.txt has the right length."""
    key = _read_key(subagent)
    return bool(key) and _sha256(str(len(key))) == KEY_LENGTH_SHA256


def check_key_decrypts(subagent):
    """The key in solution.txt decrypts cipher.txt to the original text."""
    key = _read_key(subagent)
    if not key or not (key.isascii() and key.isalpha()):
        return False
    return _sha256(_decrypt(subagent.read_file("cipher.txt"), key)) == PLAINTEXT_SHA256
